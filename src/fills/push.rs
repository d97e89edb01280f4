//! `tickgate fills push`: the retrying client of fills.md.
//!
//! Reads a JSON-lines file, sends it in batches to `POST /v1/fills`, and
//! retries only what is safe and useful to retry. Each batch's
//! `Idempotency-Key` is derived from its content (K1: one key per logical
//! batch, the same on every attempt and on every re-run of the whole job),
//! so a retry after a `429` that had in fact been committed is answered from
//! the server's stored answer (K4) instead of applying the batch twice.
//! Batches are sent one after another, in file order, so that a BUST never
//! overtakes the FILL it cancels.
//!
//! The policy (which outcomes retry, how long to wait) is the sans-I/O
//! `fills::backoff`; this file does the sockets, files and sleeping.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::backoff::{parse_retry_after, AttemptOutcome, BackoffPolicy, Decision, SplitMix64};

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// JSON-lines file of events (`-` for standard input). Optional with
    /// `--resend-dead-letters`.
    pub file: Option<PathBuf>,
    /// Base URL of the tickgate fills endpoint, e.g. `http://127.0.0.1:8088`
    /// (`/v1/fills` is appended unless the URL already has a path), or
    /// `unix:/run/tickgate/fills.sock` for the API's Unix socket.
    #[arg(long)]
    pub url: String,
    /// Bearer token of this client. Falls back to $TICKGATE_FILLS_TOKEN
    /// (keeps the token out of the process list).
    #[arg(long)]
    pub token: Option<String>,
    /// Events per batch.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Attempts per batch, the first one included.
    #[arg(long, default_value_t = 5)]
    pub max_attempts: u32,
    /// Backoff base: the first retry waits uniform(0, base).
    #[arg(long, default_value_t = 200)]
    pub backoff_base_ms: u64,
    /// Backoff cap, also the longest `Retry-After` honoured.
    #[arg(long, default_value_t = 30_000)]
    pub backoff_cap_ms: u64,
    /// Timeout of one attempt (connect, send, answer).
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Where batches that still fail are written, with their last error.
    #[arg(long, default_value = "./tickgate-data/push-dead-letters")]
    pub dead_letter_dir: PathBuf,
    /// Re-send the batches in the dead-letter folder (each removed once
    /// accepted), before FILE if one is given.
    #[arg(long)]
    pub resend_dead_letters: bool,
    /// Prefix of the derived idempotency keys.
    #[arg(long, default_value = "push-")]
    pub key_prefix: String,
}

pub fn main(args: PushArgs) -> anyhow::Result<i32> {
    let token = match args.token.clone() {
        Some(t) => t,
        None => std::env::var("TICKGATE_FILLS_TOKEN")
            .context("no --token and no $TICKGATE_FILLS_TOKEN")?,
    };
    anyhow::ensure!(args.batch > 0, "--batch must be at least 1");
    anyhow::ensure!(
        args.file.is_some() || args.resend_dead_letters,
        "nothing to do: give a FILE or --resend-dead-letters"
    );
    anyhow::ensure!(
        args.key_prefix.len() <= 64
            && args
                .key_prefix
                .bytes()
                .all(|c| c.is_ascii_graphic() && c != b'/' && c != b'\\'),
        "--key-prefix must be at most 64 visible ASCII characters without slashes"
    );
    let url = endpoint_url(&args.url)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(run(args, url, token))
}

/// What the run did, printed at the end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub batches_ok: u64,
    pub batches_replayed: u64,
    pub batches_failed: u64,
    pub events_applied: u64,
    pub events_duplicate: u64,
    pub events_rejected: u64,
    /// BUSTs whose FILL the server has not seen yet (kept, not lost).
    pub events_held: u64,
    pub unreadable_lines: u64,
    pub retries: u64,
}

/// One batch as sent: its key and its events as the file had them.
#[derive(Debug, Clone)]
struct Batch {
    key: String,
    lines: Vec<String>,
    /// Set when the batch came from the dead-letter folder.
    dead_letter: Option<PathBuf>,
}

async fn run(args: PushArgs, url: String, token: String) -> anyhow::Result<i32> {
    let policy = BackoffPolicy {
        base: Duration::from_millis(args.backoff_base_ms),
        cap: Duration::from_millis(args.backoff_cap_ms),
        max_attempts: args.max_attempts,
    };
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut progress = Progress::new();
    let mut summary = Summary::default();
    let mut rng = SplitMix64::from_time();

    let mut batches = Vec::new();
    if args.resend_dead_letters {
        batches.extend(load_dead_letters(&args.dead_letter_dir, &args.key_prefix)?);
    }
    if let Some(file) = &args.file {
        let (lines, unreadable) = read_events(file)?;
        summary.unreadable_lines = unreadable;
        batches.extend(lines.chunks(args.batch).map(|chunk| Batch {
            key: batch_key(&args.key_prefix, chunk),
            lines: chunk.to_vec(),
            dead_letter: None,
        }));
    }

    let total = batches.len();
    let mut rejected_shown = 0usize;
    for (i, batch) in batches.iter().enumerate() {
        let result = send_with_retries(&url, &token, batch, policy, timeout, &mut rng, |p| {
            progress.retry(i + 1, total, p);
        })
        .await;
        summary.retries += u64::from(result.attempts.saturating_sub(1));
        match result.outcome {
            Ok(answer) => {
                summary.batches_ok += 1;
                summary.batches_replayed += u64::from(answer.replayed);
                summary.events_applied += answer.applied;
                summary.events_duplicate += answer.duplicate;
                summary.events_rejected += answer.rejected;
                summary.events_held += answer.held;
                for r in &answer.rejections {
                    if rejected_shown < 20 {
                        progress.line(&format!("rejected in batch {}: {r}", batch.key));
                    }
                    rejected_shown += 1;
                }
                if let Some(path) = &batch.dead_letter {
                    remove_dead_letter(path)?;
                }
            }
            Err(last_error) => {
                summary.batches_failed += 1;
                let path = write_dead_letter(
                    &args.dead_letter_dir,
                    batch,
                    &url,
                    result.attempts,
                    &last_error,
                )?;
                progress.line(&format!(
                    "batch {} failed after {} attempt(s): {last_error}; dead-lettered to {}",
                    batch.key,
                    result.attempts,
                    path.display()
                ));
            }
        }
        progress.batch_done(i + 1, total, &summary);
    }
    if rejected_shown > 20 {
        progress.line(&format!(
            "... and {} more rejected events",
            rejected_shown - 20
        ));
    }
    progress.finish();
    println!("{}", summary.render(&args.dead_letter_dir));
    Ok(
        if summary.batches_failed > 0 || summary.unreadable_lines > 0 {
            1
        } else if summary.events_rejected + summary.events_held > 0 {
            super::EXIT_NOT_ALL_APPLIED
        } else {
            0
        },
    )
}

impl Summary {
    pub fn render(&self, dead_letter_dir: &Path) -> String {
        let mut s = format!(
            "push: batches ok {} (replayed {}), failed {}; events applied {}, duplicate {}, rejected {}, held {}; retries {}",
            self.batches_ok,
            self.batches_replayed,
            self.batches_failed,
            self.events_applied,
            self.events_duplicate,
            self.events_rejected,
            self.events_held,
            self.retries
        );
        if self.unreadable_lines > 0 {
            s.push_str(&format!(
                "; unreadable lines {} (not sent)",
                self.unreadable_lines
            ));
        }
        if self.batches_failed > 0 {
            s.push_str(&format!("; dead letters in {}", dead_letter_dir.display()));
        }
        s
    }
}

/// `Idempotency-Key` of a batch: the prefix and the hex SHA-256 of its
/// lines joined by `\n` (K1: derived from content, so a re-run of the same
/// file sends the same keys). 64 hex chars plus a short prefix stay well
/// under the 255-char limit.
pub fn batch_key(prefix: &str, lines: &[String]) -> String {
    let mut h = Sha256::new();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            h.update(b"\n");
        }
        h.update(line.as_bytes());
    }
    format!("{prefix}{}", hex::encode(h.finalize()))
}

/// The request body: the lines verbatim (each already checked to be JSON)
/// inside `{"events":[...]}`.
pub fn batch_body(lines: &[String]) -> Bytes {
    let mut body = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum::<usize>() + 13);
    body.push_str("{\"events\":[");
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(line);
    }
    body.push_str("]}");
    Bytes::from(body)
}

/// The events of a JSON-lines file, trimmed, blank lines skipped. A line
/// that is not JSON is reported (with its line number) and not sent: it
/// could only make the whole batch a `400`.
fn read_events(file: &Path) -> anyhow::Result<(Vec<String>, u64)> {
    let reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?,
        ))
    };
    use crate::fills::cli::MAX_EVENT_LINE;
    use crate::util::lines::{read_line, skip_line, Line};
    let mut reader = reader;
    let mut lines = Vec::new();
    let mut unreadable = 0;
    let mut buf = Vec::new();
    for n in 0.. {
        let read = read_line(&mut reader, &mut buf, MAX_EVENT_LINE)
            .with_context(|| format!("reading {} line {}", file.display(), n + 1))?;
        match read {
            Line::Eof => break,
            Line::Read => {}
            Line::TooLong => {
                // Dropped as it is read, never held whole.
                skip_line(&mut reader)
                    .with_context(|| format!("reading {} line {}", file.display(), n + 1))?;
                eprintln!(
                    "{}:{}: longer than {MAX_EVENT_LINE} bytes, not sent",
                    file.display(),
                    n + 1
                );
                unreadable += 1;
                continue;
            }
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            eprintln!("{}:{}: not UTF-8, not sent", file.display(), n + 1);
            unreadable += 1;
            continue;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(line) {
            eprintln!("{}:{}: not JSON, not sent: {e}", file.display(), n + 1);
            unreadable += 1;
            continue;
        }
        lines.push(line.to_owned());
    }
    Ok((lines, unreadable))
}

/// The totals of an accepted batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchAnswer {
    pub status: u16,
    pub replayed: bool,
    pub applied: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub held: u64,
    /// "event_id: reason" of each rejected event.
    pub rejections: Vec<String>,
}

/// Reads a `200` body (fills.md K4, `model::batch_answer`): one result per
/// event of the batch, in input order (`index` 0, 1, ...), each `applied`,
/// `duplicate`, `rejected` (with a reason) or `held`, and totals that
/// agree with the results. Anything else is not a delivery this client can
/// vouch for: an error, and the batch is dead-lettered (its key kept, so a
/// re-send is answered from the server's stored answer if it was in fact
/// applied, K4).
pub fn parse_answer(
    status: u16,
    replayed: bool,
    body: &[u8],
    events: usize,
) -> Result<BatchAnswer, String> {
    let mut a = BatchAnswer {
        status,
        replayed,
        ..Default::default()
    };
    if status != 200 {
        return Err(format!(
            "HTTP {status} is not a batch answer (expected 200): {}",
            problem_summary(body)
        ));
    }
    let v = serde_json::from_slice::<serde_json::Value>(body).map_err(|e| {
        format!(
            "HTTP 200 with a body that is not JSON ({e}): {}",
            problem_summary(body)
        )
    })?;
    let results = v
        .get("results")
        .and_then(|r| r.as_array())
        .ok_or("HTTP 200 without a `results` array")?;
    if results.len() != events {
        return Err(format!(
            "HTTP 200 answering {} of the {events} events sent",
            results.len()
        ));
    }
    for (i, r) in results.iter().enumerate() {
        if r.get("index").and_then(|x| x.as_u64()) != Some(i as u64) {
            return Err(format!(
                "HTTP 200 whose result {i} does not carry index {i}: {r}"
            ));
        }
        let field = |k: &str| r.get(k).and_then(|s| s.as_str());
        match field("status") {
            Some("applied") => a.applied += 1,
            Some("duplicate") => a.duplicate += 1,
            Some("held") => a.held += 1,
            Some("rejected") => {
                a.rejected += 1;
                let id = field("event_id").unwrap_or("?");
                let reason = field("reason").unwrap_or("?");
                a.rejections.push(format!("{id}: {reason}"));
            }
            _ => return Err(format!("HTTP 200 with result {i} of no known status: {r}")),
        }
    }
    let totals = &v["totals"];
    let count = |k: &str| totals.get(k).and_then(|x| x.as_u64());
    let claimed = (
        count("applied"),
        count("duplicate"),
        count("rejected"),
        count("held"),
    );
    let counted = (
        Some(a.applied),
        Some(a.duplicate),
        Some(a.rejected),
        Some(a.held),
    );
    if claimed != counted {
        return Err(format!(
            "HTTP 200 whose totals {totals} disagree with its results \
             (applied {}, duplicate {}, rejected {}, held {})",
            a.applied, a.duplicate, a.rejected, a.held
        ));
    }
    Ok(a)
}

/// The most bytes read of an answer to a batch of `body_len` bytes and
/// `events` events: a result repeats at most an event's ids and a reason
/// quoting a field of it (escaped, so up to a few times its size), plus a
/// fixed part. An answer over this is not read further, so an endless body
/// costs a bounded amount of memory.
pub fn answer_cap(body_len: usize, events: usize) -> usize {
    body_len
        .saturating_mul(4)
        .saturating_add(events.saturating_mul(2048))
        .saturating_add(64 * 1024)
}

struct SendResult {
    attempts: u32,
    outcome: Result<BatchAnswer, String>,
}

/// Sends one batch until it is answered with a `2xx`, a non-retryable
/// status, or the attempt budget runs out. Every attempt carries the same
/// key and the same body.
async fn send_with_retries(
    url: &str,
    token: &str,
    batch: &Batch,
    policy: BackoffPolicy,
    timeout: Duration,
    rng: &mut SplitMix64,
    mut on_retry: impl FnMut(&str),
) -> SendResult {
    let body = batch_body(&batch.lines);
    let answer_cap = answer_cap(body.len(), batch.lines.len());
    let headers = [
        ("authorization".to_owned(), format!("Bearer {token}")),
        ("idempotency-key".to_owned(), batch.key.clone()),
        ("content-type".to_owned(), "application/json".to_owned()),
    ];
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let (outcome, retry_after, error) =
            match http_request_capped("POST", url, &headers, body.clone(), timeout, answer_cap)
                .await
            {
                Ok(resp) if (200..300).contains(&resp.status) => {
                    let replayed = resp
                        .header("idempotent-replayed")
                        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                    return SendResult {
                        attempts,
                        outcome: parse_answer(resp.status, replayed, &resp.body, batch.lines.len()),
                    };
                }
                Ok(resp) => {
                    let ra = resp
                        .header("retry-after")
                        .and_then(|v| parse_retry_after(v, unix_now_secs()));
                    let error = format!("HTTP {}: {}", resp.status, problem_summary(&resp.body));
                    (AttemptOutcome::Status(resp.status), ra, error)
                }
                Err(HttpError::Timeout) => (
                    AttemptOutcome::Timeout,
                    None,
                    format!("no answer within {timeout:?}"),
                ),
                Err(HttpError::Connection(e)) => {
                    (AttemptOutcome::Connection, None, format!("connection: {e}"))
                }
                Err(HttpError::Request(e)) => {
                    return SendResult {
                        attempts,
                        outcome: Err(format!("request: {e}")),
                    }
                }
                // Not a batch answer whatever it says: the batch is kept.
                Err(e @ HttpError::AnswerTooLarge(_)) => {
                    return SendResult {
                        attempts,
                        outcome: Err(e.to_string()),
                    }
                }
            };
        match policy.decide(attempts, outcome, retry_after, rng.next_u64()) {
            Decision::Retry(wait) => {
                on_retry(&format!(
                    "attempt {attempts} failed: {error}; retrying in {wait:.1?}"
                ));
                tokio::time::sleep(wait).await;
            }
            Decision::GiveUpNotRetryable | Decision::GiveUpExhausted => {
                return SendResult {
                    attempts,
                    outcome: Err(error),
                }
            }
        }
    }
}

/// `title: detail` of a problem+json body, or the start of any other body.
fn problem_summary(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let title = v.get("title").and_then(|s| s.as_str());
        let detail = v.get("detail").and_then(|s| s.as_str());
        match (title, detail) {
            (Some(t), Some(d)) => return format!("{t}: {d}"),
            (Some(t), None) => return t.to_owned(),
            _ => {}
        }
    }
    let text = String::from_utf8_lossy(body);
    text.chars().take(300).collect()
}

fn unix_now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------- dead letters

/// The record next to a dead-lettered batch.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct DeadLetterError {
    key: String,
    url: String,
    attempts: u32,
    last_error: String,
    /// Unix seconds.
    at: i64,
    events: usize,
}

fn error_path(batch_path: &Path) -> PathBuf {
    batch_path.with_extension("error.json")
}

/// Writes `<dir>/<unix-nanos>-<key>.jsonl` (the batch's lines) and
/// `<...>.error.json` (its key and last error). Names sort in the order the
/// batches failed, which is the order `--resend-dead-letters` sends them.
/// Each file is written to a temporary name and renamed, so a crash never
/// leaves half a batch. A batch that came from the folder keeps its file and
/// only gets a new error record.
fn write_dead_letter(
    dir: &Path,
    batch: &Batch,
    url: &str,
    attempts: u32,
    last_error: &str,
) -> anyhow::Result<PathBuf> {
    crate::fills::files::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = match &batch.dead_letter {
        Some(p) => p.clone(),
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let path = dir.join(format!("{nanos:020}-{}.jsonl", batch.key));
            let mut text = batch.lines.join("\n");
            text.push('\n');
            write_atomically(&path, text.as_bytes())?;
            path
        }
    };
    let record = DeadLetterError {
        key: batch.key.clone(),
        url: url.to_owned(),
        attempts,
        last_error: last_error.to_owned(),
        at: unix_now_secs(),
        events: batch.lines.len(),
    };
    let json = serde_json::to_vec_pretty(&record).context("encoding dead-letter record")?;
    write_atomically(&error_path(&path), &json)?;
    Ok(path)
}

fn write_atomically(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = crate::fills::files::create_file(&tmp, crate::fills::files::RECORD_MODE)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// The dead-lettered batches, oldest first, each with its original key
/// (from its error record; re-derived from its content if that is gone).
fn load_dead_letters(dir: &Path, key_prefix: &str) -> anyhow::Result<Vec<Batch>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|x| x == "jsonl") {
            paths.push(path);
        }
    }
    paths.sort();
    let mut batches = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let lines: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if lines.is_empty() {
            continue;
        }
        let key = std::fs::read(error_path(&path))
            .ok()
            .and_then(|b| serde_json::from_slice::<DeadLetterError>(&b).ok())
            .map(|r| r.key)
            .unwrap_or_else(|| batch_key(key_prefix, &lines));
        batches.push(Batch {
            key,
            lines,
            dead_letter: Some(path),
        });
    }
    Ok(batches)
}

fn remove_dead_letter(path: &Path) -> anyhow::Result<()> {
    std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    match std::fs::remove_file(error_path(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", error_path(path).display()))
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------- progress

/// An in-place status line on a terminal, plain lines otherwise.
struct Progress {
    tty: bool,
    dirty: bool,
}

impl Progress {
    fn new() -> Self {
        Progress {
            tty: std::io::stderr().is_terminal(),
            dirty: false,
        }
    }

    fn status(&mut self, text: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            // One screen line, or `\r` cannot take it back.
            let short: String = text.chars().take(150).collect();
            let _ = write!(err, "\r\x1b[2K{short}");
            self.dirty = true;
        } else {
            let _ = writeln!(err, "{text}");
        }
        let _ = err.flush();
    }

    /// A message that must stay visible.
    fn line(&mut self, text: &str) {
        let mut err = std::io::stderr().lock();
        if self.dirty {
            let _ = write!(err, "\r\x1b[2K");
            self.dirty = false;
        }
        let _ = writeln!(err, "{text}");
    }

    fn retry(&mut self, n: usize, total: usize, text: &str) {
        let text = format!("batch {n}/{total}: {text}");
        if self.tty {
            self.status(&text);
        } else {
            self.line(&text);
        }
    }

    fn batch_done(&mut self, n: usize, total: usize, s: &Summary) {
        self.status(&format!(
            "batch {n}/{total} done: ok {} (replayed {}), failed {}; applied {}, duplicate {}, rejected {}",
            s.batches_ok,
            s.batches_replayed,
            s.batches_failed,
            s.events_applied,
            s.events_duplicate,
            s.events_rejected
        ));
    }

    fn finish(&mut self) {
        if self.dirty {
            eprintln!();
            self.dirty = false;
        }
    }
}

// ---------------------------------------------------------------- HTTP client

/// `http://host[:port]` + `/v1/fills` unless the URL names a path;
/// `unix:SOCKET` (the API's Unix socket, `fills.http.socket`) as it is.
pub fn endpoint_url(base: &str) -> anyhow::Result<String> {
    if let Some(path) = base.strip_prefix("unix:") {
        anyhow::ensure!(
            path.starts_with('/'),
            "a unix: URL names the socket by its absolute path, e.g. unix:/run/tickgate/fills.sock: {base:?}"
        );
        return Ok(base.to_owned());
    }
    let uri: hyper::Uri = base.parse().with_context(|| format!("bad URL {base:?}"))?;
    anyhow::ensure!(
        uri.scheme_str() == Some("http"),
        "only http:// URLs are supported (run TLS in a local proxy): {base:?}"
    );
    anyhow::ensure!(uri.host().is_some(), "URL without a host: {base:?}");
    if uri.path().is_empty() || uri.path() == "/" {
        Ok(format!("{}/v1/fills", base.trim_end_matches('/')))
    } else {
        Ok(base.to_owned())
    }
}

/// An answer of the minimal HTTP/1.1 client below.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("timed out")]
    Timeout,
    /// Connect failed or the connection broke: the request may or may not
    /// have been processed.
    #[error("{0}")]
    Connection(String),
    /// The request could not even be built (bad URL or header).
    #[error("{0}")]
    Request(String),
    /// The answer's body ran over the cap; reading stopped there.
    #[error("answer body over {0} bytes, not read further")]
    AnswerTooLarge(usize),
}

/// The answer cap of [`http_request`].
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// One HTTP/1.1 exchange on a fresh connection (hyper's low-level client:
/// no pool, no TLS; enough for one batch at a time). The timeout covers
/// connect, send and the whole answer; an answer body over
/// [`MAX_ANSWER_BYTES`] is an error.
pub async fn http_request(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    timeout: Duration,
) -> Result<HttpResponse, HttpError> {
    http_request_capped(method, url, headers, body, timeout, MAX_ANSWER_BYTES).await
}

/// [`http_request`] reading at most `max_answer` bytes of the answer body.
pub async fn http_request_capped(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    timeout: Duration,
    max_answer: usize,
) -> Result<HttpResponse, HttpError> {
    let exchange = exchange(method, url, headers, body, max_answer);
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(HttpError::Timeout),
    }
}

/// `POST`s to a `unix:SOCKET` URL go to this path of the API.
const UNIX_SOCKET_PATH: &str = "/v1/fills";

async fn exchange(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    max_answer: usize,
) -> Result<HttpResponse, HttpError> {
    if let Some(socket) = url.strip_prefix("unix:") {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| HttpError::Connection(format!("connecting to {socket}: {e}")))?;
        let target = (UNIX_SOCKET_PATH, "localhost");
        return exchange_on(stream, method, target, headers, body, max_answer).await;
    }
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| HttpError::Request(format!("bad URL {url:?}: {e}")))?;
    let host = uri
        .host()
        .ok_or_else(|| HttpError::Request(format!("URL without a host: {url:?}")))?;
    let port = uri.port_u16().unwrap_or(80);
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_else(|| host.to_owned());
    // An IPv6 literal comes back bracketed from `host()`.
    let connect_host = host.trim_start_matches('[').trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((connect_host, port))
        .await
        .map_err(|e| HttpError::Connection(format!("connecting to {authority}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    exchange_on(
        stream,
        method,
        (path, &authority),
        headers,
        body,
        max_answer,
    )
    .await
}

/// One exchange on a connected stream: `target` is the request's path and
/// `Host`.
async fn exchange_on<S>(
    stream: S,
    method: &str,
    (path, authority): (&str, &str),
    headers: &[(String, String)],
    body: Bytes,
    max_answer: usize,
) -> Result<HttpResponse, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| HttpError::Connection(e.to_string()))?;
    let driver = tokio::spawn(conn);

    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority);
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(axum::body::Body::from(body))
        .map_err(|e| HttpError::Request(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| HttpError::Connection(e.to_string()))?;
    let status = resp.status().as_u16();
    let (parts, incoming) = resp.into_parts();
    let body = read_capped(incoming, max_answer).await;
    driver.abort();
    let body = body?;
    Ok(HttpResponse {
        status,
        headers: parts.headers,
        body,
    })
}

/// The body, chunk by chunk, stopping as soon as it runs over `max`.
async fn read_capped(incoming: hyper::body::Incoming, max: usize) -> Result<Bytes, HttpError> {
    use futures::StreamExt;
    let mut chunks = axum::body::Body::new(incoming).into_data_stream();
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| HttpError::Connection(format!("reading the answer: {e}")))?;
        if body.len() + chunk.len() > max {
            return Err(HttpError::AnswerTooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn key_depends_on_content_only() {
        let a = lines(&[r#"{"kind":"FILL","event_id":"1"}"#, r#"{"kind":"BUST"}"#]);
        let b = lines(&[r#"{"kind":"FILL","event_id":"2"}"#, r#"{"kind":"BUST"}"#]);
        assert_eq!(batch_key("push-", &a), batch_key("push-", &a.clone()));
        assert_ne!(batch_key("push-", &a), batch_key("push-", &b));
        // Line boundaries count: ["ab"] and ["a","b"] differ.
        assert_ne!(
            batch_key("p", &lines(&["ab"])),
            batch_key("p", &lines(&["a", "b"]))
        );
        let k = batch_key("push-", &a);
        assert!(k.starts_with("push-") && k.len() == 5 + 64);
        assert!(k.bytes().all(|c| c.is_ascii_graphic()));
    }

    #[test]
    fn body_wraps_lines_verbatim() {
        let body = batch_body(&lines(&[r#"{"a":"1"}"#, r#"{"b":"2"}"#]));
        assert_eq!(&body[..], br#"{"events":[{"a":"1"},{"b":"2"}]}"#);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["events"].as_array().unwrap().len(), 2);
        assert_eq!(&batch_body(&[])[..], br#"{"events":[]}"#);
    }

    #[test]
    fn endpoint_url_forms() {
        assert_eq!(
            endpoint_url("http://127.0.0.1:8088").unwrap(),
            "http://127.0.0.1:8088/v1/fills"
        );
        assert_eq!(
            endpoint_url("http://127.0.0.1:8088/").unwrap(),
            "http://127.0.0.1:8088/v1/fills"
        );
        assert_eq!(
            endpoint_url("http://h:1/custom/fills").unwrap(),
            "http://h:1/custom/fills"
        );
        assert!(endpoint_url("https://h/").is_err());
        assert!(endpoint_url("not a url").is_err());
        assert_eq!(
            endpoint_url("unix:/run/tickgate/fills.sock").unwrap(),
            "unix:/run/tickgate/fills.sock"
        );
        assert!(endpoint_url("unix:fills.sock").is_err());
    }

    #[test]
    fn answer_totals_and_rejections() {
        let body = br#"{"results":[{"index":0,"event_id":"E1","status":"applied"},
            {"index":1,"event_id":"E2","status":"rejected","reason":"qty: not a decimal"},
            {"index":2,"event_id":"B1","status":"held","reason":"bust for a deal not seen yet"}],
            "totals":{"applied":1,"duplicate":0,"rejected":1,"held":1}}"#;
        let a = parse_answer(200, true, body, 3).unwrap();
        assert_eq!((a.applied, a.duplicate, a.rejected, a.held), (1, 0, 1, 1));
        assert!(a.replayed);
        assert_eq!(a.rejections, vec!["E2: qty: not a decimal".to_owned()]);
        // The server's own answer is read whole.
        let outs: Vec<_> = ["E1", "E2"]
            .iter()
            .enumerate()
            .map(|(index, id)| crate::fills::model::EventOutcome {
                index,
                kind: Some("FILL".into()),
                event_id: Some((*id).into()),
                outcome: crate::fills::model::Outcome::Applied,
            })
            .collect();
        let (_, real) = crate::fills::model::batch_answer(&outs);
        assert_eq!(parse_answer(200, false, &real, 2).unwrap().applied, 2);
        // Not an answer for every event sent: refused, never counted.
        let why = |body: &[u8], n| parse_answer(200, false, body, n).unwrap_err();
        assert!(why(b"not json", 1).contains("not JSON"));
        assert!(why(&real, 5).contains("2 of the 5"));
        assert!(why(br#"{"totals":{"applied":5}}"#, 5).contains("results"));
        let lying = br#"{"results":[{"index":0,"status":"applied"},{"index":1,"status":"applied"}],
            "totals":{"applied":1,"duplicate":0,"rejected":0,"held":0}}"#;
        assert!(why(lying, 2).contains("disagree"));
        let odd = br#"{"results":[{"index":0,"status":"lost"}],
            "totals":{"applied":0,"duplicate":0,"rejected":0,"held":0}}"#;
        assert!(why(odd, 1).contains("no known status"));
        let reordered =
            br#"{"results":[{"index":1,"status":"applied"},{"index":0,"status":"applied"}],
            "totals":{"applied":2,"duplicate":0,"rejected":0,"held":0}}"#;
        assert!(why(reordered, 2).contains("index 0"));
        assert!(parse_answer(204, false, b"", 1).is_err());
    }

    #[test]
    fn problem_summary_prefers_title_and_detail() {
        assert_eq!(
            problem_summary(br#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"busy"}"#),
            "Too Many Requests: busy"
        );
        assert_eq!(problem_summary(b"plain"), "plain");
    }

    #[test]
    fn dead_letters_round_trip_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |l: &[&str]| {
            let lines = lines(l);
            Batch {
                key: batch_key("push-", &lines),
                lines,
                dead_letter: None,
            }
        };
        let first = mk(&[r#"{"n":"1"}"#, r#"{"n":"2"}"#]);
        let second = mk(&[r#"{"n":"3"}"#]);
        let p1 = write_dead_letter(dir.path(), &first, "http://x", 5, "HTTP 500").unwrap();
        let p2 = write_dead_letter(dir.path(), &second, "http://x", 5, "HTTP 503").unwrap();
        assert!(error_path(&p1).exists() && error_path(&p2).exists());
        let loaded = load_dead_letters(dir.path(), "other-").unwrap();
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded[0].lines, first.lines);
        // The original key survives, whatever the prefix of this run.
        assert_eq!(loaded[0].key, first.key);
        assert_eq!(loaded[1].lines, second.lines);
        // Failing again keeps the batch file and refreshes its error.
        write_dead_letter(dir.path(), &loaded[0], "http://x", 5, "HTTP 502").unwrap();
        let rec: DeadLetterError =
            serde_json::from_slice(&std::fs::read(error_path(&p1)).unwrap()).unwrap();
        assert_eq!(rec.last_error, "HTTP 502");
        remove_dead_letter(&p1).unwrap();
        assert!(!p1.exists() && !error_path(&p1).exists());
        assert_eq!(load_dead_letters(dir.path(), "push-").unwrap().len(), 1);
        assert!(load_dead_letters(&dir.path().join("missing"), "p")
            .unwrap()
            .is_empty());
    }
}

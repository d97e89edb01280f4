//! What the broker sources of the reliable lane (`nats`: JetStream,
//! `kafka`) share: decoding a message into an event or a dead-letter
//! cause, the text of a dead letter's headers, the pause between consumer
//! sessions, their counters, and the `tickgate fills consume*` command's
//! process set-up. Each source keeps what its broker makes different (acks
//! and redelivery for JetStream, partitions and stored offsets for Kafka).

use std::future::Future;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use super::config::FillsConfig;
use super::metrics::FillsMetrics;
use super::model::{self, Event};
use super::store::Store;

/// Longest reason put in a header (headers are single lines of text).
pub const MAX_REASON_LEN: usize = 1000;

/// Why a message's bytes are not an event: a dead letter's cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undecoded {
    /// Not UTF-8, not JSON, or no event kind.
    Undecodable(String),
    /// JSON, but not a valid event.
    Invalid(String),
}

/// A message body as an event, or why it is a dead letter (pure). `what`
/// names the body in the reason ("payload", "value").
pub fn decode_event(body: &[u8], what: &str) -> Result<Event, Undecoded> {
    let text = std::str::from_utf8(body)
        .map_err(|e| Undecoded::Undecodable(format!("{what} is not UTF-8: {e}")))?;
    match model::parse_line(text) {
        Ok(ev) => Ok(ev),
        Err(inv) if inv.reason.starts_with("malformed JSON") || inv.kind.is_none() => {
            Err(Undecoded::Undecodable(inv.reason))
        }
        Err(inv) => Err(Undecoded::Invalid(inv.reason)),
    }
}

/// One line of printable text, bounded: a header value cannot hold CR/LF.
pub fn header_text(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > MAX_REASON_LEN {
        let mut cut = MAX_REASON_LEN;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// The pause before a failed consumer session starts again: 0.5 s, then
/// doubling to 30 s; a session that had run over a minute before failing
/// starts again from the short pause (it had been working).
#[derive(Debug)]
pub struct RestartPause {
    next: Duration,
}

impl RestartPause {
    const FIRST: Duration = Duration::from_millis(500);
    const LONGEST: Duration = Duration::from_secs(30);
    const WORKING: Duration = Duration::from_secs(60);

    pub fn new() -> RestartPause {
        RestartPause { next: Self::FIRST }
    }

    /// The pause after a session that started at `started` failed `now`.
    pub fn after_failure(&mut self, started: Instant, now: Instant) -> Duration {
        if now.saturating_duration_since(started) > Self::WORKING {
            self.next = Self::FIRST;
        }
        let pause = self.next;
        self.next = (pause * 2).min(Self::LONGEST);
        pause
    }
}

impl Default for RestartPause {
    fn default() -> Self {
        RestartPause::new()
    }
}

/// A counter registered in `reg`.
pub fn counter(reg: &Registry, name: &str, help: &str) -> prometheus::Result<IntCounter> {
    let c = IntCounter::new(name, help)?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A source's dead letters by cause, registered in `reg`.
pub fn dead_letter_counter(
    reg: &Registry,
    name: &str,
    help: &str,
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), &["cause"])?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

/// SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("fills consumer: shutting down");
}

/// The process around a `tickgate fills consume*` command: logs to stderr,
/// an async runtime, the store of `fills`, then `consume` with the store
/// and its metrics until it returns (on SIGINT or SIGTERM).
pub fn run_consumer_command<C, Fut>(fills: &FillsConfig, consume: C) -> anyhow::Result<i32>
where
    C: FnOnce(Store, FillsMetrics) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not into a pipe or a
        // file; a closed stderr loses the lines, no more (no panic).
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let fills_metrics = FillsMetrics::unregistered();
        let store = Store::open(fills, fills_metrics.clone())
            .await
            .with_context(|| format!("opening the store {}", fills.db))?;
        consume(store, fills_metrics).await
    })?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_pause_doubles_to_its_cap_and_resets_after_a_working_session() {
        let mut p = RestartPause::new();
        let t0 = Instant::now();
        let pauses: Vec<u64> = (0..8)
            .map(|_| p.after_failure(t0, t0).as_millis() as u64)
            .collect();
        assert_eq!(
            pauses,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000],
            "doubling from 0.5 s, capped at 30 s"
        );
        let later = t0 + Duration::from_secs(61);
        assert_eq!(p.after_failure(t0, later), Duration::from_millis(500));
        assert_eq!(p.after_failure(later, later), Duration::from_secs(1));
    }

    #[test]
    fn decode_event_tells_undecodable_from_invalid() {
        assert!(matches!(
            decode_event(&[0xff, 0xfe], "value"),
            Err(Undecoded::Undecodable(r)) if r.starts_with("value is not UTF-8")
        ));
        assert!(matches!(
            decode_event(b"{nope", "payload"),
            Err(Undecoded::Undecodable(_))
        ));
        assert!(matches!(
            decode_event(br#"{"kind":"FILL","event_id":"E-1"}"#, "payload"),
            Err(Undecoded::Invalid(_))
        ));
    }

    #[test]
    fn header_text_is_one_bounded_line() {
        assert_eq!(header_text("a\r\nb\tc"), "a  b c");
        let long = "é".repeat(MAX_REASON_LEN);
        let h = header_text(&long);
        assert!(h.len() <= MAX_REASON_LEN + 3 && h.ends_with("..."));
    }
}

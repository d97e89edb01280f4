//! `tickgate fills apply`: JSON-lines events from a file or standard input,
//! for replays and recovery. Prints a summary; rejected lines go to stderr
//! with their line number and reason. Exit 0 when every event was applied
//! (or was a duplicate), 3 ([`super::EXIT_NOT_ALL_APPLIED`]) when some were
//! rejected or held, 2 when an I/O or database error stops the run (then
//! everything before the failing batch is committed, and re-running the
//! same file is harmless: F1).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::util::lines::{read_line, skip_line, Line};

use anyhow::Context;

use super::config::FillsConfig;
use super::metrics::FillsMetrics;
use super::model::{parse_line, EventOutcome, Invalid, Outcome, Parsed, Totals};
use super::store::Store;

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// JSON-lines file, or - for standard input.
    pub input: String,
    /// Config file whose [fills] section names the database.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Database, overriding the config: sqlite:PATH or a postgres:// URL
    /// (default sqlite:./tickgate-data/fills.db).
    #[arg(long)]
    pub db: Option<String>,
    /// Events per transaction (default: the config's max_batch).
    #[arg(long)]
    pub batch: Option<usize>,
}

/// `load` reads `--config`'s `[fills]` section (the caller's config
/// reader: the whole file validated as `run` validates it).
pub fn apply_main(
    args: ApplyArgs,
    load: impl Fn(&Path) -> anyhow::Result<FillsConfig>,
) -> anyhow::Result<i32> {
    let mut cfg = match &args.config {
        Some(path) => load(path)?,
        None => FillsConfig::default(),
    };
    if let Some(db) = &args.db {
        cfg.db = db.clone();
    }
    if let Some(b) = args.batch {
        cfg.max_batch = b;
    }
    cfg.validate()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let input: Box<dyn Read> = if args.input == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            std::fs::File::open(&args.input).with_context(|| format!("opening {}", args.input))?,
        )
    };
    let summary = rt.block_on(async {
        let store = Store::open(&cfg, FillsMetrics::unregistered()).await?;
        apply_reader(
            &store,
            BufReader::new(input),
            cfg.max_batch,
            &mut std::io::stderr().lock(),
        )
        .await
    })?;
    println!("{summary}");
    Ok(if summary.totals.rejected + summary.totals.held > 0 {
        super::EXIT_NOT_ALL_APPLIED
    } else {
        0
    })
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplySummary {
    pub totals: Totals,
    /// Of `totals.duplicate`: caught only by the unique (account, deal_id) (F3).
    pub duplicate_by_deal: usize,
    pub lines: usize,
}

impl std::fmt::Display for ApplySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "applied {} / duplicate {} ({} by deal_id) / rejected {} / held {} ({} events)",
            self.totals.applied,
            self.totals.duplicate,
            self.duplicate_by_deal,
            self.totals.rejected,
            self.totals.held,
            self.lines
        )
    }
}

/// Longest event line read by `fills apply` and `fills push` (its `\n`
/// not counted): longer is rejected with its line number, never held
/// whole. Far above any event, and the HTTP body limit's default.
pub const MAX_EVENT_LINE: usize = 1 << 20;

/// Apply every non-blank line of `input`, `batch` lines per transaction,
/// writing `line N: rejected: reason` to `rejects`; a line longer than
/// `MAX_EVENT_LINE` is rejected so.
pub async fn apply_reader<R: BufRead, W: Write>(
    store: &Store,
    mut input: R,
    batch: usize,
    rejects: &mut W,
) -> anyhow::Result<ApplySummary> {
    let batch = batch.max(1);
    let mut summary = ApplySummary::default();
    let mut pending: Vec<Parsed> = Vec::with_capacity(batch);
    let mut line_nos: Vec<usize> = Vec::with_capacity(batch);
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        let read = read_line(&mut input, &mut buf, MAX_EVENT_LINE)
            .with_context(|| format!("reading input line {}", line_no + 1))?;
        let n = usize::from(read != Line::Eof);
        if read == Line::TooLong {
            line_no += 1;
            // Dropped as it is read, never held whole.
            skip_line(&mut input).with_context(|| format!("reading input line {line_no}"))?;
            pending.push(Err(Invalid {
                kind: None,
                event_id: None,
                reason: format!("line is longer than {MAX_EVENT_LINE} bytes"),
            }));
            line_nos.push(line_no);
        } else if n > 0 {
            line_no += 1;
            let text = std::str::from_utf8(&buf).map(str::trim);
            match text {
                Ok("") => {}
                Ok(t) => {
                    pending.push(parse_line(t));
                    line_nos.push(line_no);
                }
                Err(_) => {
                    pending.push(Err(Invalid {
                        kind: None,
                        event_id: None,
                        reason: "line is not UTF-8".into(),
                    }));
                    line_nos.push(line_no);
                }
            }
        }
        if pending.len() >= batch || (n == 0 && !pending.is_empty()) {
            let outs = store
                .apply_events("file", std::mem::take(&mut pending))
                .await?;
            report(&outs, &line_nos, &mut summary, rejects)?;
            line_nos.clear();
        }
        if n == 0 {
            return Ok(summary);
        }
    }
}

fn report<W: Write>(
    outs: &[EventOutcome],
    line_nos: &[usize],
    summary: &mut ApplySummary,
    rejects: &mut W,
) -> anyhow::Result<()> {
    summary.totals.add(Totals::of(outs));
    summary.lines += outs.len();
    for o in outs {
        let line = line_nos.get(o.index).copied().unwrap_or(0);
        match &o.outcome {
            Outcome::Rejected(reason) | Outcome::Conflict(reason) => {
                writeln!(rejects, "line {line}: rejected: {reason}")?;
            }
            Outcome::DuplicateByDealId => summary.duplicate_by_deal += 1,
            _ => {}
        }
    }
    Ok(())
}

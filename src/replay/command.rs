//! `tickgate replay`: a capture through the same core, capture time as the
//! clock (gate.md "Asking the past: replay with checks").
//!
//! The captures (one or more) are streamed, never loaded whole
//! (`capture::stream`: plain, gzip or zstd, pcap or pcapng), in exact
//! timestamp order, capture order among equal stamps (files in the order
//! given, then each file's order), whatever order they were written in: a
//! first pass finds each file's sorted runs, which are merged, or sorted in
//! spilled chunks when they are too many for the memory budget
//! (`capture::merge`, `capture::spill`). Each datagram goes to `feed::Feed`
//! with its stamp as `now` (`engine`). Checks are answered by the same
//! `gate::protocol::answer` the socket uses, with `now = T`, after every
//! packet stamped at or before `T` and before any later one (`checks`).

use std::io::{BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;

use super::checks::{run_checks, ChecksError};
use super::engine::{replay_from_config, Replay};
use super::feed::{FeedSpec, ReplayLine};
use super::populate::Populator;
use super::progress::Progress;
use super::summary::{summary_text, ts_str, write_summary_json};
use super::timeline::Recorder;
use crate::capture::stream::{CaptureStream, StreamOptions, StreamSummary};
use crate::capture::venue_arg::VenueArg;
use crate::feed::{FeedSettings, Mode};
use crate::sim::live::{refuse_unroutable, send_paced, McastSender, Pace, SenderOptions};
use crate::util::signals::stop_on_signals;
use crate::venue::cme_mdp3::line_kind::{LineEvidence, Verdict};
use crate::venue::{LineKind, VenueKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayMode {
    Full,
    Delta,
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The captures: pcap or pcapng, or a Nasdaq BinaryFILE (a historical
    /// TotalView-ITCH day, `MMDDYYYY.NASDAQ_ITCH50`), plain, gzip or zstd
    /// compressed (told by their content, not their name). Several (e.g.
    /// one per line) are merged in time order, the files' order among
    /// equal stamps.
    #[arg(required = true, num_args = 1.., value_name = "CAPTURE")]
    pub captures: Vec<PathBuf>,
    /// A Nasdaq BinaryFILE's day (New York), when its name does not start
    /// with it (`MMDDYYYY.`): its messages carry only the time since
    /// midnight.
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub date: Option<jiff::civil::Date>,
    /// Feeds and lines from a tickgate config file (each feed's lines are
    /// matched by group:port).
    #[arg(long, value_name = "FILE", conflicts_with = "mode")]
    pub config: Option<PathBuf>,
    /// Without --config: the one feed's mode (default: full; tickgate
    /// venue only).
    #[arg(long, value_enum)]
    pub mode: Option<ReplayMode>,
    /// Without --config: the venue the capture's feed speaks (venues.md),
    /// with that venue's default settings.
    #[arg(long, value_enum, default_value_t = VenueArg::Tickgate, conflicts_with = "config")]
    pub venue: VenueArg,
    /// Keep only datagrams sent to this destination (repeatable).
    #[arg(long = "filter", value_name = "ADDR:PORT")]
    pub filter: Vec<SocketAddrV4>,
    /// Lines `<unix_ns> <request line>`: answer them as the gate would have.
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    pub checks: Option<PathBuf>,
    /// The summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// With --json: add what the replay loop cost (`timing`: wall and
    /// thread CPU ns, and both per message applied), which differs from
    /// run to run.
    #[arg(long, requires = "json")]
    pub timing: bool,
    /// Re-send the datagrams to their (multicast) destinations instead of
    /// replaying them through the core.
    #[arg(long, conflicts_with_all = ["json", "checks"])]
    pub send: bool,
    /// With --send: recorded pace divided by this (2 = twice as fast).
    #[arg(long, requires = "send", conflicts_with = "max_speed")]
    pub speed: Option<f64>,
    /// With --send: as fast as possible.
    #[arg(long, requires = "send")]
    pub max_speed: bool,
    /// With --send: interface to send from (name or IPv4 address).
    #[arg(long, default_value = "127.0.0.1")]
    pub interface: crate::net::receiver::InterfaceSpec,
    /// With --send: multicast TTL (1 stays on the local segment).
    #[arg(long, default_value_t = 1)]
    pub ttl: u32,
    /// Most memory putting the captures in time order may hold, MiB (at
    /// least 1): readers of their sorted runs, or chunks sorted in memory
    /// and spilled when the runs are too many to read at once.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub sort_memory_mib: usize,
    /// Directory of the spill files (default: the system's temporary
    /// directory, `TMPDIR`).
    #[arg(long, value_name = "DIR")]
    pub sort_dir: Option<PathBuf>,
    #[command(flatten)]
    pub timeline: super::timeline::TimelineArgs,
}

impl ReplayArgs {
    /// How the captures are streamed.
    pub fn stream_options(&self) -> StreamOptions {
        StreamOptions {
            filter: self.filter.clone(),
            memory_bytes: self.sort_memory_mib.saturating_mul(1 << 20),
            spill_dir: self.sort_dir.clone(),
            date: self.date,
        }
    }
}

/// One replay of an opened stream: the state it left, the answers and
/// what the loop cost.
struct Pass {
    replay: Replay,
    out: Vec<u8>,
    checks_error: Option<ChecksError>,
    wall_ns: u64,
    cpu_ns: u64,
}

fn replay_pass(
    args: &ReplayArgs,
    cap: &mut CaptureStream,
    learnt: Option<&LearntLines>,
) -> anyhow::Result<Pass> {
    let timeline = Recorder::from_args(&args.timeline)?;
    let mut replay = match &args.config {
        Some(path) => replay_from_config(path)?,
        None => {
            let venue = args.venue.kind();
            // venues.md: `mode` does not apply to venue feeds.
            if venue.is_venue_feed() && args.mode.is_some() {
                anyhow::bail!("--mode does not apply to --venue {venue} (its quotes are whole)");
            }
            let mut settings = FeedSettings::for_venue(venue);
            settings.mode = match args.mode.unwrap_or(ReplayMode::Full) {
                ReplayMode::Full => Mode::Full,
                ReplayMode::Delta => Mode::Delta,
            };
            match learnt {
                // Lines by what they carry; a destination first seen
                // after the scan is a new incremental line, as without.
                Some(learnt) => {
                    let r = Replay::new(vec![FeedSpec {
                        name: "replay".to_string(),
                        settings,
                        lines: learnt
                            .lines
                            .iter()
                            .map(|l| ReplayLine {
                                dst: l.dst,
                                source: None,
                                kind: l.kind,
                            })
                            .collect(),
                        symbols: Vec::new(),
                        rerequest: Vec::new(),
                    }]);
                    if args.filter.is_empty() {
                        r.discover_lines()
                    } else {
                        r
                    }
                }
                None if args.filter.is_empty() => {
                    Replay::single_venue_feed(settings, &[]).discover_lines()
                }
                None => Replay::single_venue_feed(settings, &args.filter),
            }
        }
    };
    if let Some(mut t) = timeline {
        t.attach(&mut replay.feeds);
        replay.timeline = Some(Box::new(t));
    }
    // The helper thread starts at a table's first request: a replay with
    // no ITCH feed never has one.
    let mut populator: Option<Option<Populator>> = None;
    replay.populate_with(move |range| {
        if let Some(p) = populator.get_or_insert_with(Populator::spawn) {
            p.ask(range);
        }
    });
    let mut checks = match &args.checks {
        Some(path) => Some(std::io::BufReader::new(
            std::fs::File::open(path)
                .with_context(|| format!("opening checks {}", path.display()))?,
        )),
        None => None,
    };
    let mut progress = Progress::stderr();
    let mut out = Vec::with_capacity(4096);
    let mut checks_error = None;
    let (wall0, cpu0) = (std::time::Instant::now(), crate::util::cpu::thread_cpu_ns());
    if let Some(checks) = &mut checks {
        checks_error = run_checks(&mut replay, cap, checks, &mut out, &mut progress).err();
    } else {
        // A stream of runs (a Nasdaq BinaryFILE alone) is taken run by run;
        // every other, and whatever a run does not hold, datagram by
        // datagram.
        while let Some(run) = cap.next_run() {
            let ts = run.datagrams.last().map_or(0, |d| d.ts_ns);
            replay.on_run(run);
            progress.tick(cap.released(), ts);
        }
        while let Some(d) = cap.next_datagram() {
            replay.on_datagram(d.src, d.dst, d.payload, d.ts);
            let ts = d.ts;
            progress.tick(cap.released(), ts);
        }
    }
    progress.finish();
    Ok(Pass {
        replay,
        out,
        checks_error,
        wall_ns: wall0.elapsed().as_nanos() as u64,
        cpu_ns: crate::util::cpu::thread_cpu_ns().saturating_sub(cpu0),
    })
}

pub fn main(args: ReplayArgs) -> anyhow::Result<i32> {
    // Refused before any capture is read.
    Recorder::from_args(&args.timeline)?;
    if args.send {
        // What was sent cannot be taken back: the first pass comes first.
        let cap = CaptureStream::open(&args.captures, args.stream_options())?;
        return replay_send(&args, cap);
    }
    let learnt = learn_line_kinds(&args)?;
    // Most captures are sorted: one streaming pass. One that is not is
    // found out as it is read; then everything starts again from a first
    // pass that finds its runs (nothing answered so far has been written).
    let (mut cap, pass) =
        match CaptureStream::open_assuming_sorted(&args.captures, args.stream_options())? {
            Some(mut cap) => {
                let pass = replay_pass(&args, &mut cap, learnt.as_ref())?;
                if cap.read_rest_for_order() {
                    eprintln!(
                        "tickgate: {}: not in time order; reading again to put it in order",
                        cap.take_error().map_or_else(
                            || "the captures".to_string(),
                            |e| e.path.display().to_string()
                        )
                    );
                    let mut cap = CaptureStream::open(&args.captures, args.stream_options())?;
                    let pass = replay_pass(&args, &mut cap, learnt.as_ref())?;
                    (cap, pass)
                } else {
                    (cap, pass)
                }
            }
            None => {
                let mut cap = CaptureStream::open(&args.captures, args.stream_options())?;
                let pass = replay_pass(&args, &mut cap, learnt.as_ref())?;
                (cap, pass)
            }
        };
    let Pass {
        mut replay,
        out,
        checks_error,
        wall_ns,
        cpu_ns,
    } = pass;
    let checks = args.checks.as_ref();
    let sum = cap.summary();
    warn_about_binaryfile(&sum);
    for f in sum.files.iter().filter(|f| f.stats.truncated_tail) {
        eprintln!(
            "tickgate: warning: {} ends in the middle of a record; replayed what came before",
            f.path.display()
        );
    }
    if let Some(t) = replay.timeline.take() {
        eprintln!(
            "tickgate: {}",
            t.finish(&replay.feeds, &args.captures, &sum)?
        );
    }
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    if checks.is_some() {
        w.write_all(&out)?;
    } else if args.json {
        let mut extra = Vec::new();
        if args.timing {
            let messages: u64 = replay
                .feeds
                .iter()
                .map(|f| f.feed.counters().messages())
                .sum();
            let per = |ns: u64| ns as f64 / messages.max(1) as f64;
            extra.push((
                "timing".to_string(),
                json!({
                    "messages": messages,
                    "wall_ns": wall_ns,
                    "thread_cpu_ns": cpu_ns,
                    "wall_ns_per_message": per(wall_ns),
                    "thread_cpu_ns_per_message": per(cpu_ns),
                }),
            ));
        }
        if let Some(learnt) = &learnt {
            extra.push(("learnt_lines".to_string(), learnt.json()));
        }
        // Written as it goes: the symbols' objects are never all held.
        write_summary_json(&mut w, &sum, &replay, extra)?;
        w.write_all(b"\n")?;
    } else {
        w.write_all(summary_text(&sum, &replay).as_bytes())?;
        if let Some(learnt) = &learnt {
            w.write_all(learnt.text().as_bytes())?;
        }
    }
    w.flush()?;
    drop(w);
    if let (Some(e), Some(path)) = (checks_error, &args.checks) {
        anyhow::bail!(
            "checks {}: {e}; the answers above are of the checks before it",
            path.display()
        );
    }
    if let Some(e) = cap.take_error() {
        anyhow::bail!(
            "{e}, after {} datagrams ({} of the capture); {} above is of what came before",
            sum.released,
            ts_span(&sum),
            if checks.is_some() {
                "the checks answered"
            } else {
                "the summary"
            }
        );
    }
    Ok(0)
}

/// Datagrams read, at most, to learn what each destination carries.
const LEARN_DATAGRAMS: u64 = 200_000;

/// One destination's kind as learnt from what it carries.
struct LearntLine {
    dst: SocketAddrV4,
    kind: LineKind,
    evidence: LineEvidence,
    untold: bool,
}

/// venues.md `cme-mdp3`, "Lines in a replay without a config": the kinds
/// of the destinations, in order of first appearance, and how many
/// datagrams were read to learn them.
struct LearntLines {
    lines: Vec<LearntLine>,
    read: u64,
    whole: bool,
}

impl LearntLines {
    fn text(&self) -> String {
        let mut s = format!(
            "\nlines learnt from what they carry (no --config; {} datagrams read{}):\n",
            self.read,
            if self.whole {
                ", the whole capture"
            } else {
                "; a destination first seen later is incremental"
            }
        );
        for l in &self.lines {
            let e = &l.evidence;
            s.push_str(&format!(
                "  line {}: {}{} ({} datagrams with incremental messages, {} with snapshots, {} with definitions only, {} with none of these)\n",
                l.dst,
                l.kind.name(),
                if l.untold { ", nothing told otherwise" } else { "" },
                e.incremental,
                e.snapshot,
                e.definition,
                e.silent
            ));
        }
        s
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "datagrams_read": self.read,
            "whole_capture": self.whole,
            "lines": self.lines.iter().map(|l| json!({
                "dst": l.dst.to_string(),
                "kind": l.kind.name(),
                "told": !l.untold,
                "incremental": l.evidence.incremental,
                "snapshot": l.evidence.snapshot,
                "definition": l.evidence.definition,
                "silent": l.evidence.silent,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Without --config, a venue whose channels have snapshot or definition
/// loops beside the incremental lines (`cme-mdp3`): each destination's
/// kind from the templates it carries in the capture's first
/// `LEARN_DATAGRAMS` datagrams. A destination that carries both
/// snapshots and incremental messages is refused, with the config that
/// says which is which. `None` for the other venues and with --config.
fn learn_line_kinds(args: &ReplayArgs) -> anyhow::Result<Option<LearntLines>> {
    if args.config.is_some() || args.venue.kind() != VenueKind::CmeMdp3 {
        return Ok(None);
    }
    let mut cap = match CaptureStream::open_assuming_sorted(&args.captures, args.stream_options())?
    {
        Some(cap) => cap,
        None => CaptureStream::open(&args.captures, args.stream_options())?,
    };
    let mut seen: Vec<(SocketAddrV4, LineEvidence)> = Vec::new();
    let mut index: std::collections::HashMap<SocketAddrV4, usize> = Default::default();
    let mut read = 0u64;
    let mut whole = true;
    while let Some(d) = cap.next_datagram() {
        if read == LEARN_DATAGRAMS {
            whole = false;
            break;
        }
        read += 1;
        let i = *index.entry(d.dst).or_insert_with(|| {
            seen.push((d.dst, LineEvidence::default()));
            seen.len() - 1
        });
        seen[i].1.add(d.payload);
    }
    // The run of a read error is reported by the replay itself.
    let mut lines = Vec::with_capacity(seen.len());
    let mut mixed = Vec::new();
    for (dst, evidence) in seen {
        let (kind, untold) = match evidence.verdict() {
            Verdict::Kind(k) => (k, false),
            Verdict::Untold => (LineKind::Incremental, true),
            Verdict::Mixed => {
                mixed.push(dst);
                (LineKind::Incremental, false)
            }
        };
        lines.push(LearntLine {
            dst,
            kind,
            evidence,
            untold,
        });
    }
    if !mixed.is_empty() {
        // The config is the refusal's result (standard output); the error
        // one line, as every error.
        let mut out = std::io::stdout().lock();
        out.write_all(config_for(&lines).as_bytes())?;
        out.flush()?;
        let list: Vec<String> = mixed.iter().map(|d| d.to_string()).collect();
        anyhow::bail!(
            "{} carry both snapshots and incremental messages: their kind cannot be learnt from the capture; \
             the config on standard output names every line's kind as learnt: correct it and replay with --config FILE",
            list.join(", ")
        );
    }
    Ok(Some(LearntLines { lines, read, whole }))
}

/// A config with one feed whose lines are `lines`, kinds as learnt (the
/// user corrects the ones that are wrong).
fn config_for(lines: &[LearntLine]) -> String {
    let mut s = String::from("[[feed]]\nname = \"cme\"\nvenue = \"cme-mdp3\"\n");
    for (i, l) in lines.iter().enumerate() {
        s.push_str(&format!(
            "\n[[feed.line]]\nname = \"L{}\"\ngroup = \"{}\"\nport = {}\nkind = \"{}\"    # incremental, snapshot or definition\n",
            i + 1,
            l.dst.ip(),
            l.dst.port(),
            l.kind.name()
        ));
    }
    s
}

/// Up to where a stream got, for an error.
fn ts_span(sum: &StreamSummary) -> String {
    match (sum.first_ts, sum.last_ts) {
        (Some(a), Some(b)) => format!("{} .. {}", ts_str(a), ts_str(b)),
        _ => "nothing".to_string(),
    }
}

/// A BinaryFILE's messages of unknown type are passed on (the venue
/// skips and counts them): say where the first one is, and how many
/// datagrams went back in time (applied in sequence order).
fn warn_about_binaryfile(sum: &StreamSummary) {
    for f in &sum.files {
        let Some(b) = &f.binaryfile else {
            continue;
        };
        let path = f.path.display();
        if b.stats.backwards > 0 {
            eprintln!(
                "tickgate: warning: {path}: {} BinaryFILE datagrams stamped earlier than the one before; applied at that stamp, in sequence order (stamps_backwards)",
                b.stats.backwards
            );
        }
        if let Some((message, offset, kind)) = b.stats.first_unknown {
            eprintln!(
                "tickgate: warning: {path}: {} BinaryFILE messages of a type ITCH 5.0 does not have, the first message {message} at byte {offset} (type {kind:#04x}); passed on, counted as unknown_messages",
                b.stats.unknown_types
            );
        }
    }
}

/// `tickgate replay CAPTURE --send`: the capture's datagrams re-sent to
/// their destinations, in time order, at the recorded pace (`--speed`) or
/// as fast as possible (`--max-speed`). Streamed: a destination is checked
/// when it first comes, and one that may not be sent to ends the run there.
fn replay_send(args: &ReplayArgs, mut cap: CaptureStream) -> anyhow::Result<i32> {
    let pace = if args.max_speed {
        Pace::MaxSpeed
    } else {
        Pace::Recorded {
            speed: args.speed.unwrap_or(1.0),
        }
    };
    pace.validate()?;
    let iface = args.interface.resolve()?;
    let mut opts = SenderOptions::new(iface);
    opts.ttl = args.ttl;
    let mut tx = McastSender::open(&opts)?;
    let stop = stop_on_signals();
    let mut destinations: Vec<SocketAddrV4> = Vec::new();
    let mut refused: Option<anyhow::Error> = None;
    let mut progress = Progress::stderr();
    let items = std::iter::from_fn(|| {
        let d = cap.next_datagram()?;
        if !destinations.contains(&d.dst) {
            if let Err(e) = refuse_unroutable(*d.dst.ip(), iface) {
                refused = Some(e);
                return None;
            }
            destinations.push(d.dst);
        }
        let item = (d.ts, d.dst, d.payload.to_vec());
        progress.tick(cap.released(), item.0);
        Some(item)
    });
    let st = send_paced(&mut tx, items, pace, stop, None)?;
    progress.finish();
    if let Some(e) = refused {
        return Err(e);
    }
    let sum = cap.summary();
    warn_about_binaryfile(&sum);
    eprintln!(
        "sent {} of {} datagrams ({} bytes) to {} destination(s) in {:.3} s, {:.0}/s",
        st.datagrams,
        sum.released,
        st.bytes,
        destinations.len(),
        st.elapsed.as_secs_f64(),
        st.rate()
    );
    if let Some(e) = cap.take_error() {
        anyhow::bail!(
            "{e}, after {} datagrams ({} of the capture)",
            sum.released,
            ts_span(&sum)
        );
    }
    Ok(0)
}

//! Replay throughput: a 10-million-message simulated capture through the
//! path `tickgate replay CAPTURE --json` takes (the file is written to a
//! temporary directory first, so it is read from the page cache).
//!
//! `cargo bench --bench replay`
//!
//! Untimed: the seeded `Simulator` (1,000 symbols, full feed, lines A and B,
//! 16 quotes a packet, heartbeat and snapshot rounds, 0.3 % loss per line)
//! writes a nanosecond pcap. Timed, in phases:
//!
//! - stream only: a `CaptureStream` over the pcap (the first pass that
//!   finds its sorted runs, then record headers, Ethernet/IPv4/UDP parsing
//!   and the copy of each payload), every datagram taken and dropped;
//! - stream + feed: the same, every datagram through `Replay::on_datagram`
//!   (routing, lines found as they come, session notes,
//!   `Feed::on_datagram`), capture time as the clock;
//! - summary: `summary_json` serialized into a buffer.
//!
//! Then, separately, the core alone: the same datagrams pre-extracted as
//! `(line, ts, payload)` and only `Feed::on_datagram` timed, into a fresh
//! feed each round.
//!
//! Each phase is timed with the wall clock and with the thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`, which leaves out waiting for a CPU on this
//! shared machine); the median of the rounds is reported.
//!
//! Without `--bench` (as under `cargo test --all-targets`) it runs one round
//! over 100,000 messages. `REPLAY_BENCH_MESSAGES` and `REPLAY_BENCH_ROUNDS`
//! override the size and the number of rounds.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tickgate::capture::stream::{CaptureStream, StreamOptions};
use tickgate::capture::PcapWriter;
use tickgate::feed::{Feed, FeedSettings, Mode};
use tickgate::replay::engine::Replay;
use tickgate::replay::summary::summary_json;
use tickgate::sim::simulate::{default_lines, SimConfig, SimMode, SimTruth, Simulator};

const SYMBOLS: usize = 1_000;
const BATCH: usize = 16;
/// Quotes per second; heartbeat and snapshot rounds come on top.
const RATE: u64 = 1_000_000;
const HEARTBEAT_MS: u64 = 250;
/// Not a multiple of `HEARTBEAT_MS`: the simulator skips a snapshot round
/// that falls due together with a heartbeat round.
const SNAPSHOT_MS: u64 = 1_001;
/// Per line: about 1 packet in 100,000 is lost on both (an unrecoverable gap).
const LOSS: f64 = 0.003;

fn config(messages: u64) -> SimConfig {
    let mut cfg = SimConfig::new(42);
    cfg.symbols = SYMBOLS;
    cfg.mode = SimMode::Full;
    cfg.rate = RATE;
    cfg.batch = BATCH;
    cfg.heartbeat_ms = HEARTBEAT_MS;
    cfg.snapshot_ms = SNAPSHOT_MS;
    cfg.channel_heartbeat_ms = 1_000;
    cfg.lines = default_lines(&["A", "B"], "10.0.0.1".parse().unwrap(), 40000, 10_000);
    for l in &mut cfg.lines {
        l.loss = LOSS;
    }
    // messages per second: quotes, one heartbeat per symbol per round, one
    // snapshot per symbol per round
    let per_s = RATE as f64
        + SYMBOLS as f64 * 1_000.0 / HEARTBEAT_MS as f64
        + SYMBOLS as f64 * 1_000.0 / SNAPSHOT_MS as f64;
    cfg.duration_ns = (messages as f64 / per_s * 1e9) as i64;
    cfg
}

/// The simulated capture as a nanosecond pcap in memory.
fn generate(messages: u64) -> (Vec<u8>, SimTruth) {
    let mut sim = Simulator::new(config(messages)).expect("valid config");
    // two copies of ~62 bytes a message, plus ~60 bytes of headers a packet
    let estimate = (messages as usize * 62 * 2) / 100 * 107 + (1 << 20);
    let mut w = PcapWriter::new(Vec::with_capacity(estimate)).unwrap();
    let mut buf = Vec::with_capacity(1500);
    while let Some(ev) = sim.next_into(&mut buf) {
        w.write_udp(ev.t_ns, ev.src, ev.dst, &buf).unwrap();
    }
    (w.into_inner().unwrap(), sim.truth().clone())
}

fn thread_cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a
    // constant Linux supports for every thread.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Wall and thread-CPU time of one phase.
#[derive(Clone, Copy, Default)]
struct Took {
    wall: Duration,
    cpu: Duration,
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Took) {
    let (w0, c0) = (Instant::now(), thread_cpu_now());
    let out = f();
    let took = Took {
        wall: w0.elapsed(),
        cpu: thread_cpu_now().saturating_sub(c0),
    };
    (out, took)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One phase over all rounds: median wall and CPU.
fn med(rounds: &[Took]) -> Took {
    Took {
        wall: median(rounds.iter().map(|t| t.wall).collect()),
        cpu: median(rounds.iter().map(|t| t.cpu).collect()),
    }
}

struct Counts {
    /// Distinct provider messages in the capture (each on two lines).
    messages: u64,
    datagrams: u64,
}

fn row(what: &str, t: Took, n: &Counts) {
    let rate = |count: u64, d: Duration| count as f64 / d.as_secs_f64() / 1e6;
    println!(
        "| {what} | {:.3} s | {:.2} M msg/s, {:.2} M dgram/s | {:.3} s | {:.2} M msg/s, {:.2} M dgram/s |",
        t.cpu.as_secs_f64(),
        rate(n.messages, t.cpu),
        rate(n.datagrams, t.cpu),
        t.wall.as_secs_f64(),
        rate(n.messages, t.wall),
        rate(n.datagrams, t.wall),
    );
}

fn peak_rss_mb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number"))
    })
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let messages =
        env_u64("REPLAY_BENCH_MESSAGES").unwrap_or(if bench { 10_000_000 } else { 100_000 });
    let rounds = env_u64("REPLAY_BENCH_ROUNDS")
        .unwrap_or(if bench { 3 } else { 1 })
        .max(1) as usize;

    let t0 = Instant::now();
    let (pcap, truth) = generate(messages);
    println!(
        "generated (untimed) in {:.1} s: {} messages ({} quotes, {} heartbeats, {} snapshots), {} datagrams on 2 lines, pcap {} MB; packets dropped on A {}, on B {}, on both {} ({} messages)",
        t0.elapsed().as_secs_f64(),
        truth.messages,
        truth.quotes,
        truth.heartbeats,
        truth.snapshots,
        truth.datagrams,
        pcap.len() >> 20,
        truth.lines[0].dropped,
        truth.lines[1].dropped,
        truth.packets_lost_all_lines,
        truth.messages_lost_all_lines,
    );
    let n = Counts {
        messages: truth.messages,
        datagrams: truth.datagrams,
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bench.pcap");
    std::fs::write(&file, &pcap).unwrap();
    let files = [file];
    let open = || CaptureStream::open(&files, StreamOptions::default()).unwrap();

    // The whole path, phase by phase: the stream alone (read, parse, the
    // first pass), then the stream into the replay, then the summary.
    let (mut load, mut feed, mut summary, mut total) = (vec![], vec![], vec![], vec![]);
    let mut json_len = 0;
    for _ in 0..rounds {
        let (count, t_load) = timed(|| {
            let mut cap = open();
            let mut n = 0u64;
            while let Some(d) = cap.next_datagram() {
                black_box(d.payload);
                n += 1;
            }
            n
        });
        assert_eq!(count, truth.datagrams);
        let ((cap, replay), t_feed) = timed(|| {
            let mut cap = open();
            let mut replay = Replay::single_feed(Mode::Full, &[]).discover_lines();
            while let Some(d) = cap.next_datagram() {
                replay.on_datagram(d.src, d.dst, d.payload, d.ts);
            }
            (cap.summary(), replay)
        });
        let (json, t_summary) = timed(|| {
            let v = summary_json(&cap, &replay);
            let mut out = Vec::with_capacity(1 << 20);
            serde_json::to_writer(&mut out, &v).unwrap();
            out
        });
        // what the replay found is what the simulator injected
        let c = replay.feeds[0].feed.counters();
        assert_eq!(cap.released, truth.datagrams);
        assert!(cap.was_sorted());
        assert_eq!(c.channel_messages_lost, truth.expected_channel_lost);
        assert_eq!(c.duplicate_packets(), truth.expected_duplicate_packets);
        assert_eq!(replay.unmatched, 0);
        json_len = black_box(json).len();
        load.push(t_load);
        feed.push(t_feed);
        summary.push(t_summary);
        total.push(Took {
            wall: t_feed.wall + t_summary.wall,
            cpu: t_feed.cpu + t_summary.cpu,
        });
    }

    // The core alone, over the same datagrams pre-extracted into an arena.
    let mut arena = Vec::new();
    let mut records: Vec<(usize, i64, usize, usize)> = Vec::new();
    let mut dsts = Vec::new();
    let mut cap = open();
    while let Some(d) = cap.next_datagram() {
        let line = match dsts.iter().position(|&x| x == d.dst) {
            Some(l) => l,
            None => {
                dsts.push(d.dst);
                dsts.len() - 1
            }
        };
        records.push((line, d.ts, arena.len(), d.payload.len()));
        arena.extend_from_slice(d.payload);
    }
    drop(cap);
    drop(pcap);
    let extracted: Vec<(usize, i64, &[u8])> = records
        .iter()
        .map(|&(line, ts, start, len)| (line, ts, &arena[start..start + len]))
        .collect();
    let mut core = vec![];
    for _ in 0..rounds {
        let settings = FeedSettings {
            mode: Mode::Full,
            ..FeedSettings::default()
        };
        let mut f = Feed::new(settings, dsts.len());
        let ((), t) = timed(|| {
            for &(line, ts, payload) in &extracted {
                f.on_datagram(line, black_box(payload), ts);
            }
        });
        assert_eq!(
            f.counters().channel_messages_lost,
            truth.expected_channel_lost
        );
        core.push(t);
    }

    println!();
    println!(
        "{} rounds, median; {} messages = {} distinct provider messages (each on lines A and B), {} datagrams",
        rounds, n.messages, n.messages, n.datagrams
    );
    println!("| phase | thread CPU | CPU rate | wall | wall rate |");
    println!("|---|---:|---:|---:|---:|");
    row("whole replay (stream + feed, summary)", med(&total), &n);
    row(
        "stream only: pcap read, frame parse, reorder window",
        med(&load),
        &n,
    );
    row(
        "stream + feed: `Replay::on_datagram` for every datagram",
        med(&feed),
        &n,
    );
    let s = med(&summary);
    println!(
        "| summary: `summary_json`, serialized | {:.3} s | | {:.3} s | |",
        s.cpu.as_secs_f64(),
        s.wall.as_secs_f64()
    );
    row(
        "core only: `Feed::on_datagram`, pre-extracted",
        med(&core),
        &n,
    );
    println!();
    println!(
        "summary JSON {json_len} bytes; peak RSS {} MB",
        peak_rss_mb().map_or("?".to_string(), |m| m.to_string())
    );
}

//! `tickgate demo --venue cme-mdp3`: venues.md `cme-mdp3` shown live. A
//! simulated CME channel starts first: incremental lines A and B, the
//! snapshot loop (Market Recovery) and the definition loop (Instrument
//! Recovery) on groups of their own. The daemon joins two seconds into the
//! channel (a late join): every instrument is unknown to it
//! (`unknown_symbol`) until the definition loop names it, then waits
//! (`no_snapshot`) until the snapshot loop brings its book, then is OK. Every so often a packet is lost on both
//! lines: only the instruments it touched wait for the loop again (the
//! others are unverified until their next entry), and the status line
//! says how many wait and for what.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::config::{FeedConfig, FeedMode, Liveness};
use crate::net::receiver::realtime_ns;
use crate::sim::cme_flow::instrument_name;
use crate::sim::simulate::{SimConfig, SimLine, Simulator};
use crate::venue::{LineKind, VenueKind};

use super::demo::{
    demo_dir_and_port, free_or_ephemeral, join_provider, loopback_lines, spawn_sim_sender,
    start_demo_daemon, verdicts_by_cause, with_demo_services, DemoArgs,
};
use super::{Daemon, RunOptions};

/// Instruments on the channel.
const INSTRUMENTS: usize = 16;
/// Every so many data packets the provider loses one on both lines.
const DROP_BOTH_EVERY: u64 = 3_000;
/// The daemon starts this long after the channel began.
const LATE_BY: Duration = Duration::from_secs(2);
/// One packet of each loop every so many ns: a loop of 16 snapshots takes
/// 4 packets, under a second, so that the status line (once a second)
/// shows the instruments a loss made wait.
const LOOP_INTERVAL_NS: i64 = 200_000_000;

pub fn demo_cme_main(args: DemoArgs) -> anyhow::Result<i32> {
    let (dir, port) = match demo_dir_and_port(&args, "239.255.77.1-4")? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let group = |last: u8| SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, last), port);
    let lines = [
        ("A", 1u8, LineKind::Incremental, 0),
        ("B", 2, LineKind::Incremental, 20_000),
        ("SA", 3, LineKind::Snapshot, 0),
        ("DA", 4, LineKind::Definition, 0),
    ];

    // The provider: the simulator's CME channel.
    let mut cfg = SimConfig::new(args.seed);
    cfg.venue = VenueKind::CmeMdp3;
    cfg.symbols = INSTRUMENTS;
    cfg.rate = 2_000;
    cfg.batch = 2;
    cfg.heartbeat_ms = 0;
    cfg.snapshot_ms = 0;
    cfg.channel_heartbeat_ms = 30_000;
    cfg.loop_interval_ns = LOOP_INTERVAL_NS;
    cfg.start_ns = realtime_ns();
    cfg.duration_ns = 100 * 365 * 86_400 * 1_000_000_000;
    cfg.drop_both_every = Some(DROP_BOTH_EVERY);
    let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40_000);
    cfg.lines = lines
        .iter()
        .map(|&(name, last, kind, delay_ns)| SimLine {
            name: name.into(),
            src,
            dst: group(last),
            delay_ns,
            loss: if kind == LineKind::Incremental {
                args.loss_percent / 100.0
            } else {
                0.0
            },
            kind,
        })
        .collect();
    let sim = Arc::new(Mutex::new(
        Simulator::new(cfg).context("the demo's CME channel")?,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = spawn_sim_sender(Arc::clone(&sim), Arc::clone(&stop), "demo-cme-provider")?;
    println!(
        "tickgate demo (cme-mdp3): a simulated CME channel on 239.255.77.1/.2:{port} (loopback), {INSTRUMENTS} instruments;"
    );
    println!(
        "  its snapshot loop on 239.255.77.3:{port}, its definition loop on 239.255.77.4:{port};"
    );
    println!(
        "  the daemon starts {} s after the channel began: every instrument is unknown_symbol until the definition loop names it, no_snapshot until the snapshot loop brings its book, then OK;",
        LATE_BY.as_secs()
    );
    println!(
        "  every {DROP_BOTH_EVERY}th packet is lost on both lines: only the instruments it touched wait for the loop (docs/venues.md)."
    );
    std::thread::sleep(LATE_BY);

    let mut feed = FeedConfig::new("cme", FeedMode::Full);
    feed.venue = VenueKind::CmeMdp3;
    feed.liveness = Liveness::Channel;
    feed.stale_ms = crate::config::DEFAULT_VENUE_STALE_MS;
    feed.gap_hold_us = crate::config::DEFAULT_VENUE_GAP_HOLD_US;
    feed.lines = loopback_lines(
        77,
        port,
        lines
            .iter()
            .map(|&(name, last, kind, _)| (name, last, kind)),
    );
    let config = with_demo_services(&dir, free_or_ephemeral(args.metrics), feed, None);
    let daemon = match start_demo_daemon(config, &stop) {
        Ok(d) => d,
        Err(code) => return Ok(code),
    };
    let socket = dir.join("gate.sock");
    println!("  gate socket: {}", socket.display());
    println!("  from another terminal:");
    println!(
        "    TICKGATE_SOCKET={} tickgate check {}",
        socket.display(),
        instrument_name(7, INSTRUMENTS)
    );
    println!("    TICKGATE_SOCKET={} tickgate status", socket.display());
    if let Some(addr) = daemon.metrics_addr() {
        println!("  metrics: http://{addr}/metrics");
    }
    println!("  Ctrl-C stops.");
    let started = realtime_ns();
    let mut out = Vec::new();
    let (first, mut shown) = status_line(&daemon, started, 0, &mut out);
    println!("{first}");
    let mut printed_at = started;
    // Looked at ten times a second, printed once a second and whenever
    // the verdicts change (a loss makes a few instruments wait briefly).
    let tick = Box::new(move |d: &Daemon| {
        let now = realtime_ns();
        let (line, verdicts) = status_line(d, now, now - started, &mut out);
        if verdicts != shown || now - printed_at >= 1_000_000_000 {
            println!("{line}");
            shown = verdicts;
            printed_at = now;
        }
    });
    let code = daemon.run(RunOptions {
        on_tick: Some((Duration::from_millis(100), tick)),
        stop_after: args.seconds.map(Duration::from_secs),
    });
    stop.store(true, Ordering::Relaxed);
    join_provider(code, sender)
}

/// The instruments by verdict (REJECTs by cause), then the recovery
/// counters; and the verdicts part alone.
fn status_line(d: &Daemon, now: i64, since_ns: i64, out: &mut Vec<u8>) -> (String, String) {
    let names = (0..INSTRUMENTS).map(|i| instrument_name(i, INSTRUMENTS));
    let (ok, causes) = verdicts_by_cause(d, names, now, out);
    let rejects = causes
        .iter()
        .map(|(c, n)| format!("{n} {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let s = d.metrics().feeds[0].stats.load();
    let verdicts = format!(
        "ok={ok} reject={}{}",
        INSTRUMENTS - ok,
        if rejects.is_empty() {
            String::new()
        } else {
            format!(" [{rejects}]")
        }
    );
    let line = format!(
        "{:>6.1}s  {verdicts} | waiting={} kept_entries={} snapshots used={} ignored={} msgs_lost={} book_errors={}",
        since_ns as f64 / 1e9,
        s.instruments_waiting,
        s.recovery_entries,
        s.snapshots_applied,
        s.snapshots_ignored,
        s.channel_messages_lost,
        s.book_errors,
    );
    (line, verdicts)
}

//! `tickgate demo --venue nasdaq-itch`: recovery.md R5 shown live. A
//! simulated Nasdaq TotalView-ITCH provider starts first, with a
//! re-request server and a GLIMPSE server on loopback; the daemon joins
//! two seconds into the session (a late join: it knows no stock, each
//! answers `unknown_symbol`), rebuilds its books from GLIMPSE, and every
//! symbol turns OK. The status line shows the symbols by cause and the recovery
//! counters.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::config::{FeedConfig, FeedMode, Liveness, SnapshotConfig};
use crate::net::receiver::realtime_ns;
use crate::sim::servers::{
    GlimpseOptions, GlimpseServer, History, RerequestOptions, RerequestServer, SnapshotSource,
};
use crate::sim::simulate::{SimConfig, SimLine, Simulator};
use crate::sim::venue_sim::venue_symbol;
use crate::venue::VenueKind;

use super::demo::{
    demo_dir_and_port, free_or_ephemeral, join_provider, loopback_lines, print_demo_access,
    run_with_status_each_second, spawn_sim_sender, start_demo_daemon, verdict_summary,
    with_demo_services, DemoArgs,
};
use super::Daemon;

/// Stocks the provider quotes, and the live orders it keeps around.
const SYMBOLS: usize = 8;
const ORDERS: usize = 4_000;
/// Every so many data packets the provider loses one on both lines: the
/// feed re-requests it (R4).
const DROP_BOTH_EVERY: u64 = 2_000;
/// The daemon starts this long after the provider's session began.
const LATE_BY: Duration = Duration::from_secs(2);
const GLIMPSE_USER: &str = "demo";
const GLIMPSE_PASSWORD: &str = "demo";

pub fn demo_itch_main(args: DemoArgs) -> anyhow::Result<i32> {
    let (dir, port) = match demo_dir_and_port(&args, "239.255.77.1/.2")? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let group = |last: u8| SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, last), port);

    // The provider: the simulator's ITCH flow on lines A and B.
    let mut cfg = SimConfig::new(args.seed);
    cfg.venue = VenueKind::NasdaqItch;
    cfg.symbols = SYMBOLS;
    cfg.orders = ORDERS;
    cfg.rate = 2_000;
    cfg.heartbeat_ms = 0;
    cfg.snapshot_ms = 0;
    cfg.start_ns = realtime_ns();
    cfg.duration_ns = 100 * 365 * 86_400 * 1_000_000_000;
    cfg.drop_both_every = Some(DROP_BOTH_EVERY);
    let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40_000);
    cfg.lines = vec![
        SimLine {
            name: "A".into(),
            src,
            dst: group(1),
            delay_ns: 0,
            loss: args.loss_percent / 100.0,
            kind: Default::default(),
        },
        SimLine {
            name: "B".into(),
            src,
            dst: group(2),
            delay_ns: 20_000,
            loss: args.loss_percent / 100.0,
            kind: Default::default(),
        },
    ];
    let mut sim = Simulator::new(cfg).context("the demo's ITCH provider")?;
    let history = Arc::new(Mutex::new(History::new(100_000)));
    sim.set_history(Arc::clone(&history));
    let sim = Arc::new(Mutex::new(sim));
    let rerequest = RerequestServer::spawn(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        history,
        RerequestOptions::default(),
    )
    .context("starting the provider's re-request server")?;
    let source: SnapshotSource = {
        let sim = Arc::clone(&sim);
        Arc::new(move || {
            sim.lock()
                .unwrap_or_else(|e| e.into_inner())
                .glimpse_snapshot()
        })
    };
    let glimpse = GlimpseServer::spawn(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        source,
        GlimpseOptions::new(GLIMPSE_USER, GLIMPSE_PASSWORD),
    )
    .context("starting the provider's GLIMPSE server")?;

    let stop = Arc::new(AtomicBool::new(false));
    let sender = spawn_sim_sender(Arc::clone(&sim), Arc::clone(&stop), "demo-itch-provider")?;
    println!(
        "tickgate demo (nasdaq-itch): a simulated TotalView-ITCH provider on 239.255.77.1/.2:{port} (loopback), {SYMBOLS} stocks, about {ORDERS} live orders;"
    );
    println!(
        "  its re-request server on {}, its GLIMPSE server on {} (user {GLIMPSE_USER}).",
        rerequest.local_addr(),
        glimpse.local_addr()
    );
    println!(
        "  the daemon starts {} s after the session began: it knows no stock yet (unknown_symbol), then rebuilds every book from GLIMPSE (docs/recovery.md).",
        LATE_BY.as_secs()
    );
    std::thread::sleep(LATE_BY);

    let mut feed = FeedConfig::new("itch", FeedMode::Full);
    feed.venue = VenueKind::NasdaqItch;
    feed.liveness = Liveness::Channel;
    feed.stale_ms = crate::config::DEFAULT_VENUE_STALE_MS;
    feed.gap_hold_us = crate::config::DEFAULT_VENUE_GAP_HOLD_US;
    feed.rerequest = vec![rerequest.local_addr()];
    feed.snapshot = Some(SnapshotConfig {
        address: glimpse.local_addr(),
        username: GLIMPSE_USER.to_string(),
        password: GLIMPSE_PASSWORD.to_string(),
        hold_mib: crate::config::DEFAULT_SNAPSHOT_HOLD_MIB,
        max_mib: crate::config::DEFAULT_SNAPSHOT_MAX_MIB,
    });
    feed.lines = loopback_lines(
        77,
        port,
        [("A", 1, Default::default()), ("B", 2, Default::default())],
    );
    let config = with_demo_services(&dir, free_or_ephemeral(args.metrics), feed, None);
    let daemon = match start_demo_daemon(config, &stop) {
        Ok(d) => d,
        Err(code) => return Ok(code),
    };
    print_demo_access(&daemon, &dir, &venue_symbol(0).to_string());
    // The first line is the moment the daemon joined: no stock trusted yet.
    let code = run_with_status_each_second(daemon, &args, status_line);
    stop.store(true, Ordering::Relaxed);
    rerequest.stop();
    glimpse.stop();
    join_provider(code, sender)
}

/// The stocks by verdict (REJECTs by cause), then the feed's counters.
fn status_line(d: &Daemon, now: i64, secs: i64, out: &mut Vec<u8>) -> String {
    let names = (0..SYMBOLS).map(|i| venue_symbol(i).to_string());
    let verdicts = verdict_summary(d, names, now, out);
    let s = d.metrics().feeds[0].stats.load();
    format!(
        "{secs:>4}s  {verdicts} | live_orders={} snapshots={} (failed {}) msgs_lost={} holes={} (filled {}, lost {}) re-requested={}",
        s.live_orders,
        s.snapshots_applied_r5,
        s.snapshots_failed,
        s.channel_messages_lost,
        s.holes_opened,
        s.holes_filled,
        s.holes_lost,
        s.messages_recovered,
    )
}

//! `tickgate demo --venue cboe-pitch`: recovery.md R4c and R5c shown live.
//! A simulated Cboe PITCH provider with three units sends on lines A and B,
//! answers Gap Requests on its gap line G through a Gap Request Proxy, and
//! runs a Spin Server per unit, all on loopback. The daemon joins two
//! seconds into the session (a late join: every unit's symbols answer
//! `no_snapshot`, or `unknown_symbol` before a message names them); each
//! unit is rebuilt by a spin and its symbols turn OK. Every so many data
//! packets the provider loses one on both lines: the unit it belongs to
//! holds, asks the proxy, and fills the hole from the gap line. The status
//! line shows the symbols by cause, the spins, the holes and the proxy's
//! counters.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::config::{FeedConfig, FeedMode, GrpConfig, Liveness, SpinConfig};
use crate::net::receiver::realtime_ns;
use crate::sim::live::{McastSender, SenderOptions};
use crate::sim::servers::{
    GrpOptions, GrpServer, PitchHistory, SpinOptions, SpinServer, SpinSource,
};
use crate::sim::simulate::{SimConfig, SimLine, Simulator};
use crate::sim::venue_sim::venue_symbol;
use crate::venue::cboe_pitch::session::Login;
use crate::venue::{LineKind, VenueKind};

use super::demo::{
    demo_dir_and_port, free_or_ephemeral, join_provider, loopback_lines, print_demo_access,
    run_with_status_each_second, spawn_sim_sender, start_demo_daemon, verdict_summary,
    with_demo_services, DemoArgs,
};
use super::Daemon;

/// Symbols the provider quotes (over its units), and the live orders it
/// keeps around.
const SYMBOLS: usize = 12;
const UNITS: usize = 3;
const ORDERS: usize = 3_000;
/// Every so many data packets the provider loses one on both lines: the
/// unit's hole is filled from the gap line (R4c).
const DROP_BOTH_EVERY: u64 = 1_500;
/// The daemon starts this long after the provider's session began.
const LATE_BY: Duration = Duration::from_secs(2);

pub fn demo_pitch_main(args: DemoArgs) -> anyhow::Result<i32> {
    let (dir, port) = match demo_dir_and_port(&args, "239.255.78.1/.2/.3")? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let group = |last: u8| SocketAddrV4::new(Ipv4Addr::new(239, 255, 78, last), port);
    let login = Login::new("0001", "demo", "demo").context("the demo's Gap Request Proxy login")?;

    // The provider: the simulator's PITCH flow on lines A and B, and its
    // gap line G.
    let mut cfg = SimConfig::new(args.seed);
    cfg.venue = VenueKind::CboePitch;
    cfg.units = UNITS;
    cfg.symbols = SYMBOLS;
    cfg.orders = ORDERS;
    cfg.rate = 2_000;
    cfg.heartbeat_ms = 0;
    cfg.snapshot_ms = 0;
    cfg.start_ns = realtime_ns();
    cfg.duration_ns = 100 * 365 * 86_400 * 1_000_000_000;
    cfg.drop_both_every = Some(DROP_BOTH_EVERY);
    let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40_000);
    let line = |name: &str, last: u8, delay_ns: i64, loss: f64, kind: LineKind| SimLine {
        name: name.into(),
        src,
        dst: group(last),
        delay_ns,
        loss,
        kind,
    };
    let loss = args.loss_percent / 100.0;
    cfg.lines = vec![
        line("A", 1, 0, loss, LineKind::Incremental),
        line("B", 2, 20_000, loss, LineKind::Incremental),
        line("G", 3, 0, 0.0, LineKind::Gap),
    ];
    let mut sim = Simulator::new(cfg).context("the demo's PITCH provider")?;
    let history = Arc::new(Mutex::new(PitchHistory::new(100_000)));
    sim.set_pitch_history(Arc::clone(&history));
    let sim = Arc::new(Mutex::new(sim));
    let gap = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST))
        .context("the provider's gap line")?;
    let grp = GrpServer::spawn(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        history,
        gap,
        GrpOptions::new(login, group(3)),
    )
    .context("starting the provider's Gap Request Proxy")?;
    let mut spins = Vec::new();
    for unit in 1..=UNITS as u8 {
        let source: SpinSource = {
            let sim = Arc::clone(&sim);
            Arc::new(move || {
                sim.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .spin_image(unit)
            })
        };
        let server = SpinServer::spawn(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            source,
            SpinOptions::new(login),
        )
        .with_context(|| format!("starting the provider's Spin Server of unit {unit}"))?;
        spins.push((unit, server));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sender = spawn_sim_sender(Arc::clone(&sim), Arc::clone(&stop), "demo-pitch-provider")?;

    println!(
        "tickgate demo (cboe-pitch): a simulated Cboe PITCH provider on 239.255.78.1/.2:{port} (loopback), {UNITS} units, {SYMBOLS} stocks, about {ORDERS} live orders;"
    );
    println!(
        "  its Gap Request Proxy on {} answers on the gap line 239.255.78.3:{port}; one data packet in {DROP_BOTH_EVERY} is lost on both lines, and its unit fills the hole from the gap line (docs/recovery.md).",
        grp.local_addr()
    );
    println!(
        "  a Spin Server per unit; the daemon starts {} s after the session began: each unit is a late join (no_snapshot) until its spin rebuilds its books.",
        LATE_BY.as_secs()
    );
    std::thread::sleep(LATE_BY);

    let mut feed = FeedConfig::new("pitch", FeedMode::Full);
    feed.venue = VenueKind::CboePitch;
    feed.liveness = Liveness::Channel;
    feed.stale_ms = crate::config::DEFAULT_VENUE_STALE_MS;
    feed.gap_hold_us = crate::config::DEFAULT_VENUE_GAP_HOLD_US;
    feed.grp = Some(GrpConfig {
        address: grp.local_addr(),
        login,
        max_count: crate::config::DEFAULT_GRP_MAX_COUNT,
    });
    feed.spin = Some(SpinConfig {
        login,
        servers: spins.iter().map(|(u, s)| (*u, s.local_addr())).collect(),
        hold_mib: crate::config::DEFAULT_SNAPSHOT_HOLD_MIB,
        max_mib: crate::config::DEFAULT_SNAPSHOT_MAX_MIB,
    });
    feed.lines = loopback_lines(
        78,
        port,
        [
            ("A", 1, LineKind::Incremental),
            ("B", 2, LineKind::Incremental),
            ("G", 3, LineKind::Gap),
        ],
    );
    let config = with_demo_services(&dir, free_or_ephemeral(args.metrics), feed, None);
    let daemon = match start_demo_daemon(config, &stop) {
        Ok(d) => d,
        Err(code) => return Ok(code),
    };
    print_demo_access(&daemon, &dir, &venue_symbol(0).to_string());
    // The first line is the moment the daemon joined: no unit rebuilt yet.
    let code = run_with_status_each_second(daemon, &args, status_line);
    stop.store(true, Ordering::Relaxed);
    grp.stop();
    for (_, s) in spins {
        s.stop();
    }
    join_provider(code, sender)
}

/// The stocks by verdict (REJECTs by cause), then the feed's counters.
fn status_line(d: &Daemon, now: i64, secs: i64, out: &mut Vec<u8>) -> String {
    let names = (0..SYMBOLS).map(|i| venue_symbol(i).to_string());
    let verdicts = verdict_summary(d, names, now, out);
    let s = d.metrics().feeds[0].stats.load();
    format!(
        "{secs:>4}s  {verdicts} | live_orders={} spins={} (failed {}) msgs_lost={} holes={} (filled {}, lost {}) gap_requests={} gap_responses={} grp_logged_in={}",
        s.live_orders,
        s.snapshots_applied_r5,
        s.snapshots_failed,
        s.channel_messages_lost,
        s.holes_opened,
        s.holes_filled,
        s.holes_lost,
        s.rerequests_sent,
        s.gap_responses,
        s.grp_logged_in,
    )
}

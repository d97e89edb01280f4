//! `tickgate demo`: the daemon on loopback multicast with a built-in
//! provider that now and then loses packets on one line or both, lets one
//! symbol go silent and restarts its session, and a status line per second.
//! The gate socket is open, so `tickgate check EURUSD` works from another
//! terminal.
//!
//! The provider ([`DemoProvider`]) is sans-I/O: it is given the time and
//! returns datagrams with the lines they reach. A thread sends them.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::config::{
    Config, FeedConfig, FeedMode, GateConfig, InterfaceSpec, LineConfig, LogConfig, MetricsConfig,
    SymbolConfig,
};
use crate::fills::config::{ClientConfig, FillsConfig};
use crate::gate::server::Backend;
use crate::net::receiver::realtime_ns;
use crate::sim::live::{McastSender, SenderOptions};
use crate::sim::seeded::SplitMix64;
use crate::sim::servers::{History, RerequestOptions, RerequestServer};
use crate::wire::{Heartbeat, PacketBuilder, Quote, SessionId, Side, Symbol};

use super::notify::Notifier;
use super::{logging, Daemon, RunOptions, StartError, EXIT_CONFIG, EXIT_FAILURE};

/// The demo's symbols: (name, bid in units of 1e-9, tick in units of 1e-9).
const SYMBOLS: [(&str, i64, i64); 6] = [
    ("EURUSD", 1_085_000_000, 10_000),
    ("GBPUSD", 1_270_000_000, 10_000),
    ("USDJPY", 150_000_000_000, 1_000_000),
    ("USDCHF", 880_000_000, 10_000),
    ("AUDUSD", 660_000_000, 10_000),
    ("USDCAD", 1_360_000_000, 10_000),
];
/// The symbol that goes silent for a while in each cycle.
const SILENT: usize = 1;

const SEC: i64 = 1_000_000_000;
const MS: i64 = 1_000_000;
/// The scripted events repeat every 30 s.
const CYCLE: i64 = 30 * SEC;
const LINE_A_OUTAGE: (i64, i64) = (4 * SEC, 7 * SEC);
const BOTH_LINES_BURST_AT: i64 = 10 * SEC;
const BOTH_LINES_BURST: u32 = 3;
const SILENCE: (i64, i64) = (14 * SEC, 18 * SEC);
const SESSION_CHANGE_AT: i64 = 22 * SEC;
/// How long the status line announces the session change.
const SESSION_CHANGE_SHOWN: i64 = 2 * SEC;

/// What the provider is doing right now (for the status line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Normal = 0,
    LineAOutage = 1,
    BothLinesLoss = 2,
    SymbolSilent = 3,
    SessionChanged = 4,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::LineAOutage,
            2 => Phase::BothLinesLoss,
            3 => Phase::SymbolSilent,
            4 => Phase::SessionChanged,
            _ => Phase::Normal,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Phase::Normal => "",
            Phase::LineAOutage => "line A down; B has every packet: no loss",
            Phase::BothLinesLoss => {
                "3 packets lost on both lines: held, re-requested from the provider (msgs_lost stays 0)"
            }
            Phase::SymbolSilent => "provider stopped pricing GBPUSD (stale_quote after 500 ms)",
            Phase::SessionChanged => "provider restarted (new session, sequences from 1)",
        }
    }
}

/// One datagram and the lines it reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub line_a: bool,
    pub line_b: bool,
    pub bytes: Vec<u8>,
}

struct DemoSymbol {
    symbol: Symbol,
    seq: u64,
    bid: i64,
    tick: i64,
    spread: i64,
}

/// A small full-feed provider with scripted faults (sans-I/O).
pub struct DemoProvider {
    rng: SplitMix64,
    symbols: Vec<DemoSymbol>,
    session_no: u32,
    session: SessionId,
    next_chan: u64,
    start: i64,
    cycle: i64,
    next_quote_at: i64,
    next_hb_at: i64,
    /// Random loss per line, on top of the scripted events.
    loss: f64,
    burst_left: u32,
    phase: Phase,
    /// The session changed in this cycle already.
    restarted: bool,
    /// Packets the random loss took from both lines (each a channel gap
    /// of its own, announced by the status line).
    random_both_lost: u64,
    builder: PacketBuilder,
}

impl DemoProvider {
    pub fn new(seed: u64, start: i64, loss: f64) -> DemoProvider {
        let mut p = DemoProvider {
            rng: SplitMix64::new(seed),
            symbols: SYMBOLS
                .iter()
                .map(|&(n, px, tick)| DemoSymbol {
                    symbol: Symbol::parse(n).expect("valid symbol"),
                    seq: 0,
                    bid: px,
                    tick,
                    spread: 2,
                })
                .collect(),
            session_no: (seed % 100_000) as u32,
            session: SessionId::default(),
            next_chan: 1,
            start,
            cycle: 0,
            next_quote_at: start,
            next_hb_at: start,
            loss,
            burst_left: 0,
            phase: Phase::Normal,
            restarted: false,
            random_both_lost: 0,
            builder: PacketBuilder::new(),
        };
        p.session = p.session_id();
        p
    }

    fn session_id(&self) -> SessionId {
        SessionId::parse(&format!("DEMO{:06}", self.session_no % 1_000_000)).expect("10 bytes")
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Packets the random loss took from both lines so far.
    pub fn random_both_lost(&self) -> u64 {
        self.random_both_lost
    }

    /// Everything due at `now` (Unix ns), appended to `out`.
    pub fn step(&mut self, now: i64, out: &mut Vec<Outgoing>) {
        let elapsed = (now - self.start).max(0);
        let cycle = elapsed / CYCLE;
        let t = elapsed % CYCLE;
        if cycle != self.cycle {
            self.cycle = cycle;
            self.phase = Phase::Normal;
            self.restarted = false;
        }
        // The session change happens once per cycle, at its time, and is
        // announced for a moment.
        if t >= SESSION_CHANGE_AT && !self.restarted {
            self.session_no += 1;
            self.session = self.session_id();
            self.next_chan = 1;
            for s in &mut self.symbols {
                s.seq = 0;
            }
            self.restarted = true;
        }
        if self.restarted {
            self.phase = if t < SESSION_CHANGE_AT + SESSION_CHANGE_SHOWN {
                Phase::SessionChanged
            } else {
                Phase::Normal
            };
        } else {
            self.phase = if (LINE_A_OUTAGE.0..LINE_A_OUTAGE.1).contains(&t) {
                Phase::LineAOutage
            } else if (SILENCE.0..SILENCE.1).contains(&t) {
                Phase::SymbolSilent
            } else if t >= BOTH_LINES_BURST_AT
                && self.phase != Phase::BothLinesLoss
                && t < SILENCE.0
            {
                self.burst_left = BOTH_LINES_BURST;
                Phase::BothLinesLoss
            } else if self.phase == Phase::BothLinesLoss && t < SILENCE.0 {
                Phase::BothLinesLoss
            } else {
                Phase::Normal
            };
        }
        let silent = self.phase == Phase::SymbolSilent;
        while self.next_quote_at <= now {
            let n = 1 + self.rng.below(3) as usize;
            self.builder.start(self.session, self.next_chan);
            for _ in 0..n {
                let mut i = self.rng.below(self.symbols.len() as u64) as usize;
                if silent && i == SILENT {
                    i = 0;
                }
                let s = &mut self.symbols[i];
                s.seq += 1;
                s.bid += s.tick * (self.rng.below(3) as i64 - 1);
                let qty = 1_000_000 * (1 + self.rng.below(5));
                let q = Quote::new(
                    s.symbol,
                    s.seq,
                    now as u64,
                    Some(Side { px: s.bid, qty }),
                    Some(Side {
                        px: s.bid + s.spread * s.tick,
                        qty,
                    }),
                );
                self.builder.quote(&q);
            }
            self.emit(out);
            self.next_quote_at += 5 * MS + self.rng.below(5) as i64 * MS;
        }
        if self.next_hb_at <= now {
            self.builder.start(self.session, self.next_chan);
            for (i, s) in self.symbols.iter().enumerate() {
                if silent && i == SILENT {
                    continue;
                }
                self.builder.heartbeat(&Heartbeat {
                    flags: 0,
                    symbol: s.symbol,
                    next_seq: s.seq + 1,
                    source_ts: now as u64,
                });
            }
            self.emit(out);
            self.next_hb_at = now + 200 * MS;
        }
    }

    fn emit(&mut self, out: &mut Vec<Outgoing>) {
        self.next_chan += u64::from(self.builder.count());
        let (mut a, mut b) = (!self.rng.chance(self.loss), !self.rng.chance(self.loss));
        let scripted = self.phase == Phase::LineAOutage
            || (self.phase == Phase::BothLinesLoss && self.burst_left > 0);
        if !a && !b && !scripted {
            self.random_both_lost += 1;
        }
        if self.phase == Phase::LineAOutage {
            // B alone carries the feed, and carries all of it: the outage
            // must cost nothing.
            a = false;
            b = true;
        }
        if self.phase == Phase::BothLinesLoss && self.burst_left > 0 {
            self.burst_left -= 1;
            a = false;
            b = false;
        }
        out.push(Outgoing {
            line_a: a,
            line_b: b,
            bytes: self.builder.bytes().to_vec(),
        });
    }
}

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the gate socket goes (created if missing).
    #[arg(long, value_name = "DIR", default_value = "tickgate-data")]
    pub dir: PathBuf,
    /// Metrics address; if taken, an ephemeral port is used instead.
    #[arg(long, default_value = "127.0.0.1:9477")]
    pub metrics: SocketAddr,
    /// Multicast groups 239.255.77.1 (line A) and 239.255.77.2 (line B) on this port.
    #[arg(long, default_value_t = 47701)]
    pub port: u16,
    /// Random packet loss per line, in percent, besides the scripted events.
    #[arg(long, default_value_t = 1.0)]
    pub loss_percent: f64,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Seed of the provider's randomness.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// The fills lane's HTTP address (SQLite store in --dir); if taken, an
    /// ephemeral port is used instead.
    #[arg(long, default_value = "127.0.0.1:8088")]
    pub fills: SocketAddr,
    /// Do not run the fills lane.
    #[arg(long)]
    pub no_fills: bool,
    /// The provider's venue: tickgate's own protocol, nasdaq-itch (a
    /// simulated TotalView-ITCH provider the daemon joins late and
    /// rebuilds from its GLIMPSE snapshot; no fills lane) or cme-mdp3 (a
    /// simulated CME channel the daemon joins late and rebuilds from its
    /// snapshot loop; no fills lane) or cboe-pitch (a simulated Cboe PITCH
    /// provider of three units whose losses on both lines are filled from
    /// its gap line through its Gap Request Proxy; no fills lane).
    #[arg(long, value_enum, default_value_t = DemoVenue::Tickgate)]
    pub venue: DemoVenue,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoVenue {
    Tickgate,
    NasdaqItch,
    CmeMdp3,
    CboePitch,
}

/// The demo's bearer token for the fills API.
pub const DEMO_TOKEN: &str = "demo-token";

/// The demo's config: one full feed on two loopback lines that holds gaps
/// and re-requests from the built-in provider's server at `rerequest`
/// (recovery.md), and the fills lane on SQLite in `--dir` unless
/// `--no-fills`.
pub fn demo_config(
    args: &DemoArgs,
    metrics: SocketAddr,
    fills_http: SocketAddr,
    rerequest: Option<SocketAddr>,
) -> Config {
    let fills = (!args.no_fills).then(|| {
        let mut f = FillsConfig {
            db: format!("sqlite:{}", args.dir.join("fills.db").display()),
            ..FillsConfig::default()
        };
        f.http.listen = fills_http.to_string();
        f.http.clients = vec![ClientConfig {
            name: "demo".to_string(),
            token: DEMO_TOKEN.to_string(),
            accounts: vec!["*".to_string()],
        }];
        f
    });
    let mut feed = FeedConfig::new("demo", FeedMode::Full);
    // recovery.md: the lines run microseconds apart here; 2 ms covers them
    // with room, then the provider is asked for what both lines lost.
    feed.gap_hold_us = 2_000;
    feed.rerequest = rerequest.into_iter().collect();
    for (name, last) in [("A", 1u8), ("B", 2)] {
        feed.lines.push(LineConfig {
            name: name.to_string(),
            group: Ipv4Addr::new(239, 255, 77, last),
            port: args.port,
            interface: Some(InterfaceSpec::Addr(Ipv4Addr::LOCALHOST)),
            source: None,
            rcvbuf: None,
            kind: Default::default(),
        });
    }
    feed.symbols.push(SymbolConfig {
        symbol: Symbol::parse("EURUSD").expect("valid"),
        stale_ms: Some(250),
        source_max_age_ms: None,
    });
    with_demo_services(&args.dir, metrics, feed, fills)
}

/// The lines of a simulator-driven demo's feed (`demo_itch`, `demo_cme`,
/// `demo_pitch`): each `(name, last byte, kind)` on group
/// 239.255.`third`.`last`, port `port`, received on loopback.
pub(super) fn loopback_lines(
    third: u8,
    port: u16,
    lines: impl IntoIterator<Item = (&'static str, u8, crate::venue::LineKind)>,
) -> Vec<LineConfig> {
    lines
        .into_iter()
        .map(|(name, last, kind)| LineConfig {
            name: name.to_string(),
            group: Ipv4Addr::new(239, 255, third, last),
            port,
            interface: Some(InterfaceSpec::Addr(Ipv4Addr::LOCALHOST)),
            source: None,
            rcvbuf: None,
            kind,
        })
        .collect()
}

/// Where to reach a simulator-driven demo's daemon: its gate socket in
/// `dir`, a check of `symbol` to try from another terminal, its metrics.
pub(super) fn print_demo_access(daemon: &Daemon, dir: &Path, symbol: &str) {
    let socket = dir.join("gate.sock");
    println!("  gate socket: {}", socket.display());
    println!("  from another terminal:");
    println!(
        "    TICKGATE_SOCKET={} tickgate check {symbol}",
        socket.display()
    );
    if let Some(addr) = daemon.metrics_addr() {
        println!("  metrics: http://{addr}/metrics");
    }
    println!("  Ctrl-C stops.");
}

/// Runs a simulator-driven demo's daemon until Ctrl-C or `--seconds`,
/// printing `status_line(daemon, now, seconds since the join, scratch)` as
/// it joins and then once a second; the daemon's exit code.
pub(super) fn run_with_status_each_second(
    daemon: Daemon,
    args: &DemoArgs,
    mut status_line: impl FnMut(&Daemon, i64, i64, &mut Vec<u8>) -> String,
) -> i32 {
    let started = realtime_ns();
    let mut out = Vec::new();
    println!("{}", status_line(&daemon, started, 0, &mut out));
    let tick = Box::new(move |d: &Daemon| {
        let now = realtime_ns();
        println!(
            "{}",
            status_line(d, now, (now - started) / 1_000_000_000, &mut out)
        );
    });
    daemon.run(RunOptions {
        on_tick: Some((Duration::from_secs(1), tick)),
        stop_after: args.seconds.map(Duration::from_secs),
    })
}

/// `ok=N reject=M [n cause, ...]` for `names` checked through the
/// daemon's gate at `now` (the venue demos' status lines).
pub(super) fn verdict_summary(
    d: &Daemon,
    names: impl ExactSizeIterator<Item = String>,
    now: i64,
    out: &mut Vec<u8>,
) -> String {
    let total = names.len();
    let (ok, causes) = verdicts_by_cause(d, names, now, out);
    let rejects = causes
        .iter()
        .map(|(c, n)| format!("{n} {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    if rejects.is_empty() {
        format!("ok={ok} reject={}", total - ok)
    } else {
        format!("ok={ok} reject={} [{rejects}]", total - ok)
    }
}

/// A demo's config around its one feed: the gate socket and the shared
/// state file in `dir`, metrics on `metrics`, warnings only in the log.
pub(super) fn with_demo_services(
    dir: &Path,
    metrics: SocketAddr,
    feed: FeedConfig,
    fills: Option<FillsConfig>,
) -> Config {
    Config {
        feeds: vec![feed],
        gate: GateConfig {
            socket: dir.join("gate.sock"),
            socket_mode: 0o600,
            shm: Some(crate::config::default_shm(&dir.join("gate.sock"))),
            ..GateConfig::default()
        },
        metrics: MetricsConfig {
            listen: Some(metrics),
            ..MetricsConfig::default()
        },
        log: LogConfig {
            level: "warn".to_string(),
            ..LogConfig::default()
        },
        fills,
        fills_section: None,
    }
}

/// Ports tried, from `--port` up, for groups nobody else sends on.
const PORT_TRIES: u16 = 16;
/// How long a port is listened to before it counts as free.
const PROBE_FOR: Duration = Duration::from_millis(300);

/// The first port from `first` on whose demo groups nothing arrives for
/// [`PROBE_FOR`] (another demo's provider sends every few milliseconds).
pub(super) fn free_demo_port(first: u16) -> Option<u16> {
    (0..PORT_TRIES)
        .filter_map(|i| first.checked_add(i))
        .find(|&port| !someone_sends_on(port))
}

fn someone_sends_on(port: u16) -> bool {
    use socket2::{Domain, Protocol, Socket, Type};
    let Ok(s) = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)) else {
        return false;
    };
    let _ = s.set_reuse_address(true);
    let bound = s
        .bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into())
        .is_ok();
    for g in [
        Ipv4Addr::new(239, 255, 77, 1),
        Ipv4Addr::new(239, 255, 77, 2),
    ] {
        let _ = s.join_multicast_v4(&g, &Ipv4Addr::LOCALHOST);
    }
    if !bound || s.set_read_timeout(Some(PROBE_FOR)).is_err() {
        return false;
    }
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    s.recv(&mut buf).is_ok()
}

/// `addr`, or an ephemeral port on its address when `addr` is taken (a
/// demo must start even when another one runs).
pub(super) fn free_or_ephemeral(addr: SocketAddr) -> SocketAddr {
    match std::net::TcpListener::bind(addr) {
        Ok(_) => addr,
        Err(_) => SocketAddr::new(addr.ip(), 0),
    }
}

/// The simulator-driven demos' set-up: `--dir` created and made absolute,
/// and a port on which nobody sends to the demo's groups (`groups` names
/// them in the message); `Err` is the exit code, said on stderr.
pub(super) fn demo_dir_and_port(
    args: &DemoArgs,
    groups: &str,
) -> anyhow::Result<Result<(PathBuf, u16), i32>> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = std::fs::canonicalize(&args.dir)?;
    match free_demo_port(args.port) {
        Some(port) => Ok(Ok((dir, port))),
        None => {
            eprintln!(
                "tickgate: demo: other providers are sending on {groups} near port {}; choose another with --port",
                args.port
            );
            Ok(Err(EXIT_FAILURE))
        }
    }
}

/// The demos driven by the simulator (`demo_itch`, `demo_cme`): its
/// datagrams sent at their pace on loopback by a thread of their own until
/// `stop`.
pub(super) fn spawn_sim_sender(
    sim: std::sync::Arc<Mutex<crate::sim::simulate::Simulator>>,
    stop: std::sync::Arc<AtomicBool>,
    name: &str,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || -> anyhow::Result<()> {
            let mut tx = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST))?;
            let mut buf = Vec::new();
            let items = std::iter::from_fn(|| {
                let ev = sim
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .next_into(&mut buf)?;
                Some((ev.t_ns, ev.dst, buf.clone()))
            });
            crate::sim::live::send_paced_in_bursts(
                &mut tx,
                items,
                crate::sim::live::Pace::Recorded { speed: 1.0 },
                &stop,
                None,
                Duration::from_micros(200),
            )?;
            Ok(())
        })
        .context("starting the demo provider")
}

/// Starts the demo's daemon; `Err` is the exit code (the provider is told
/// to stop).
pub(super) fn start_demo_daemon(config: Config, stop: &AtomicBool) -> Result<Daemon, i32> {
    logging::init(&config.log);
    match Daemon::start(config, None, Notifier::disabled()) {
        Ok(d) => Ok(d),
        Err(StartError::Config(e)) => {
            stop.store(true, Ordering::Relaxed);
            eprintln!("tickgate: demo config: {e}");
            Err(EXIT_CONFIG)
        }
        Err(StartError::Other(e)) => {
            stop.store(true, Ordering::Relaxed);
            eprintln!("tickgate: {}", crate::util::errors::chain(&e));
            Err(EXIT_FAILURE)
        }
    }
}

/// The daemon's exit code once the provider thread has ended, or a
/// failure when the provider failed.
pub(super) fn join_provider(
    code: i32,
    provider: std::thread::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<i32> {
    match provider.join() {
        Ok(Ok(())) => Ok(code),
        Ok(Err(e)) => {
            eprintln!(
                "tickgate: demo provider: {}",
                crate::util::errors::chain(&e)
            );
            Ok(EXIT_FAILURE)
        }
        Err(_) => Ok(EXIT_FAILURE),
    }
}

/// Checks `names` through the daemon's gate at `now`: how many are OK,
/// and the others counted by their cause (or first reason), in order of
/// first appearance.
pub(super) fn verdicts_by_cause(
    d: &Daemon,
    names: impl Iterator<Item = String>,
    now: i64,
    out: &mut Vec<u8>,
) -> (usize, Vec<(String, usize)>) {
    let mut ok = 0;
    let mut causes: Vec<(String, usize)> = Vec::new();
    for name in names {
        out.clear();
        d.gate()
            .answer(format!("CHECK {name}").as_bytes(), now, out);
        let answer = String::from_utf8_lossy(out);
        if answer.starts_with("OK ") {
            ok += 1;
            continue;
        }
        let why = answer
            .split_whitespace()
            .find_map(|w| w.strip_prefix("suspect="))
            .or_else(|| answer.split_whitespace().nth(2))
            .unwrap_or("?")
            .to_string();
        match causes.iter_mut().find(|(c, _)| *c == why) {
            Some((_, n)) => *n += 1,
            None => causes.push((why, 1)),
        }
    }
    (ok, causes)
}

pub fn demo_main(args: DemoArgs) -> anyhow::Result<i32> {
    if !(0.0..=100.0).contains(&args.loss_percent) {
        eprintln!("tickgate: --loss-percent must be between 0 and 100");
        return Ok(EXIT_CONFIG);
    }
    match args.venue {
        DemoVenue::NasdaqItch => return super::demo_itch::demo_itch_main(args),
        DemoVenue::CmeMdp3 => return super::demo_cme::demo_cme_main(args),
        DemoVenue::CboePitch => return super::demo_pitch::demo_pitch_main(args),
        DemoVenue::Tickgate => {}
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = std::fs::canonicalize(&args.dir)?;
    // Another demo (or anything) already sending on our groups would mix
    // its packets with ours: find a port where nobody is.
    let port = match free_demo_port(args.port) {
        Some(p) if p == args.port => p,
        Some(p) => {
            eprintln!(
                "tickgate demo: another provider is sending on 239.255.77.1/.2:{}; using port {p} instead",
                args.port
            );
            p
        }
        None => {
            eprintln!(
                "tickgate: demo: other providers are sending on 239.255.77.1/.2 ports {} to {}; choose another with --port",
                args.port,
                args.port.saturating_add(PORT_TRIES - 1)
            );
            return Ok(EXIT_FAILURE);
        }
    };
    let args = DemoArgs { dir, port, ..args };
    // R4: the provider keeps its recent messages and answers re-requests
    // on loopback, as a venue's re-request server does.
    let history = Arc::new(Mutex::new(History::new(DEMO_HISTORY)));
    let rerequest = RerequestServer::spawn(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Arc::clone(&history),
        RerequestOptions::default(),
    )
    .context("starting the demo provider's re-request server")?;
    let config = demo_config(
        &args,
        free_or_ephemeral(args.metrics),
        free_or_ephemeral(args.fills),
        Some(rerequest.local_addr()),
    );
    logging::init(&config.log);
    let daemon = match Daemon::start(config, None, Notifier::disabled()) {
        Ok(d) => d,
        Err(StartError::Config(e)) => {
            eprintln!("tickgate: demo config: {e}");
            return Ok(EXIT_CONFIG);
        }
        Err(StartError::Other(e)) => {
            eprintln!("tickgate: {}", crate::util::errors::chain(&e));
            return Ok(EXIT_FAILURE);
        }
    };
    let socket = args.dir.join("gate.sock");
    println!("tickgate demo: a simulated provider on 239.255.77.1/.2:{} (loopback), one feed \"demo\", lines A and B.", args.port);
    println!("  gate socket: {}", socket.display());
    println!("  from another terminal:");
    println!(
        "    TICKGATE_SOCKET={} tickgate check EURUSD",
        socket.display()
    );
    println!(
        "    echo 'CHECK GBPUSD' | socat - UNIX-CONNECT:{}",
        socket.display()
    );
    if let Some(p) = daemon.shm() {
        println!(
            "    TICKGATE_SOCKET={} tickgate check --shm EURUSD   # from the shared state file {}",
            socket.display(),
            p.path().display()
        );
    }
    if let Some(addr) = daemon.metrics_addr() {
        println!("  metrics: http://{addr}/metrics");
    }
    if let Some(addr) = daemon.fills_addr() {
        println!(
            "  fills lane (SQLite {}): http://{addr}/v1/fills, token {DEMO_TOKEN}; send this twice: the second answer is replayed, nothing is applied twice:",
            args.dir.join("fills.db").display()
        );
        println!(
            "    curl -s -H 'Authorization: Bearer {DEMO_TOKEN}' -H 'Idempotency-Key: demo-1' -H 'Content-Type: application/json' \\\n      -d '{{\"events\":[{{\"kind\":\"FILL\",\"event_id\":\"E-1\",\"deal_id\":\"D-1\",\"account\":\"ACC-7\",\"symbol\":\"EURUSD\",\"side\":\"BUY\",\"qty\":\"100000\",\"price\":\"1.08512\",\"exec_time\":\"2026-11-30T08:00:00Z\"}}]}}' http://{addr}/v1/fills"
        );
    }
    println!(
        "  gaps are held 2 ms for the other line, then re-requested from the provider's server on {} (docs/recovery.md).",
        rerequest.local_addr()
    );
    println!("  every 30 s: line A down 4-7 s, a 3-packet loss on both lines at 10 s (recovered by re-request: msgs_lost stays 0), GBPUSD silent 14-18 s, a session change at 22 s.");
    if args.loss_percent > 0.0 {
        println!(
            "  besides: {}% random loss per line; a packet it takes from both lines is re-requested too, announced when it happens.",
            args.loss_percent
        );
    }
    println!("  Ctrl-C stops.");

    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(AtomicU8::new(Phase::Normal as u8));
    let both_lost = Arc::new(AtomicU64::new(0));
    let provider = {
        let (stop, phase, both) = (
            Arc::clone(&stop),
            Arc::clone(&phase),
            Arc::clone(&both_lost),
        );
        let (port, seed, loss) = (args.port, args.seed, args.loss_percent / 100.0);
        let history = Arc::clone(&history);
        std::thread::Builder::new()
            .name("demo-provider".into())
            .spawn(move || provide(port, seed, loss, &stop, &phase, &both, &history))
            .context("starting the demo provider")?
    };
    let mut both_announced = 0u64;
    let mut holes_seen = (0u64, 0u64, 0u64);
    let started = realtime_ns();
    let mut out = Vec::with_capacity(512);
    let tick = Box::new(move |d: &Daemon| {
        let now = realtime_ns();
        let line = status_line(
            d,
            now,
            (now - started) / SEC,
            Phase::from_u8(phase.load(Ordering::Relaxed)),
            &mut out,
        );
        let both = both_lost.load(Ordering::Relaxed);
        let random = match both - both_announced {
            0 => String::new(),
            n => format!(
                " | random loss took {} from both lines",
                crate::text::plural(n, "packet")
            ),
        };
        both_announced = both;
        let recovered = recovery_note(d, &mut holes_seen);
        println!("{line}{random}{recovered}");
    });
    let code = daemon.run(RunOptions {
        on_tick: Some((Duration::from_secs(1), tick)),
        stop_after: args.seconds.map(Duration::from_secs),
    });
    stop.store(true, Ordering::Relaxed);
    rerequest.stop();
    match provider.join() {
        Ok(Ok(())) => Ok(code),
        Ok(Err(e)) => {
            eprintln!(
                "tickgate: demo provider: {}",
                crate::util::errors::chain(&e)
            );
            Ok(EXIT_FAILURE)
        }
        Err(_) => Ok(EXIT_FAILURE),
    }
}

/// The provider thread: steps the provider every millisecond and sends.
fn provide(
    port: u16,
    seed: u64,
    loss: f64,
    stop: &AtomicBool,
    phase: &AtomicU8,
    both_lost: &AtomicU64,
    history: &Mutex<History>,
) -> anyhow::Result<()> {
    let sender = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST))
        .context("opening the demo's multicast sender on 127.0.0.1")?;
    let a = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 1), port);
    let b = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 2), port);
    let mut p = DemoProvider::new(seed, realtime_ns(), loss);
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        p.step(realtime_ns(), &mut out);
        for o in out.drain(..) {
            // Kept for re-requests whether or not a line carries it.
            history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(&o.bytes);
            // B first: its copy must not always arrive second.
            if o.line_b {
                sender.send(b, &o.bytes).context("sending on line B")?;
            }
            if o.line_a {
                sender.send(a, &o.bytes).context("sending on line A")?;
            }
        }
        phase.store(p.phase() as u8, Ordering::Relaxed);
        both_lost.store(p.random_both_lost(), Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Messages the demo provider keeps for re-requests (a few seconds).
const DEMO_HISTORY: usize = 100_000;

/// recovery.md R6, for the status line: holes closed since the last tick,
/// the messages re-requested for them and the time they were open.
fn recovery_note(d: &Daemon, seen: &mut (u64, u64, u64)) -> String {
    let m = &d.metrics().feeds[0];
    let s = m.stats.load();
    let [holes, _] = *m.recovery_times.lock().unwrap_or_else(|e| e.into_inner());
    let closed = holes.count();
    let (closed0, sum0, recovered0) = *seen;
    *seen = (closed, holes.sum_ns, s.messages_recovered);
    let n = closed.saturating_sub(closed0);
    let recovered = s.messages_recovered.saturating_sub(recovered0);
    if n == 0 || recovered == 0 {
        return String::new();
    }
    let avg_us = holes.sum_ns.saturating_sub(sum0) / n / 1000;
    format!(
        " | recovered {} by re-request ({}, open {avg_us} us on average)",
        crate::text::plural(recovered, "message"),
        crate::text::plural(n, "hole")
    )
}

/// One line: the checks of every demo symbol and the feed's counters.
fn status_line(d: &Daemon, now: i64, secs: i64, phase: Phase, out: &mut Vec<u8>) -> String {
    let (mut ok, mut rejected) = (0, Vec::new());
    let mut eur = String::from("-");
    for (name, _, _) in SYMBOLS {
        out.clear();
        let req = format!("CHECK {name}");
        d.gate().answer(req.as_bytes(), now, out);
        let answer = String::from_utf8_lossy(out);
        let mut words = answer.split_whitespace();
        match words.next() {
            Some("OK") => {
                ok += 1;
                if name == "EURUSD" {
                    let field = |k: &str| {
                        answer
                            .split_whitespace()
                            .find_map(|w| w.strip_prefix(k))
                            .and_then(|v| v.split('@').next())
                            .unwrap_or("-")
                            .to_string()
                    };
                    eur = format!("{}/{}", field("bid="), field("ask="));
                }
            }
            _ => {
                let reasons = words.nth(1).unwrap_or("?");
                let cause = answer
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("suspect="))
                    .map(|c| format!("({c})"))
                    .unwrap_or_default();
                rejected.push(format!("{name} {reasons}{cause}"));
            }
        }
    }
    let m = &d.metrics().feeds[0];
    let s = m.stats.load();
    let (la, lb) = (m.line_stats(0), m.line_stats(1));
    let rejects = if rejected.is_empty() {
        String::new()
    } else {
        format!(" [{}]", rejected.join("; "))
    };
    let event = match phase.describe() {
        "" => String::new(),
        e => format!(" | {e}"),
    };
    format!(
        "{secs:>4}s  ok={ok} reject={}{rejects} | EURUSD {eur} | pkts A={} B={} dup={} msgs_lost={} gaps={} ticks_lost={} suspect={} sessions={}{event}",
        rejected.len(),
        la.packets,
        lb.packets,
        la.duplicate_packets + lb.duplicate_packets,
        s.channel_messages_lost,
        s.channel_gaps,
        s.ticks_lost,
        s.symbols_suspect,
        s.session_changes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::{Feed, FeedSettings};

    /// Drives the provider over a whole cycle, straight into a core Feed,
    /// and checks that each scripted event has the effect it announces.
    #[test]
    fn one_cycle_of_scripted_events() {
        let start = 1_764_489_600 * SEC;
        let mut p = DemoProvider::new(1, start, 0.0);
        let mut feed = Feed::new(FeedSettings::default(), 2);
        let mut out = Vec::new();
        let mut lost_a_only = 0;
        let mut t = start;
        let at = |t: i64| t - start;
        let mut gaps_before_burst = None;
        while t < start + CYCLE + SEC {
            p.step(t, &mut out);
            for o in out.drain(..) {
                if !o.line_a && o.line_b {
                    lost_a_only += 1;
                }
                if o.line_b {
                    feed.on_datagram(1, &o.bytes, t);
                }
                if o.line_a {
                    feed.on_datagram(0, &o.bytes, t + 1000);
                }
            }
            if at(t) == BOTH_LINES_BURST_AT - MS {
                gaps_before_burst = Some(feed.counters().channel_gaps);
            }
            t += MS;
        }
        let c = feed.counters();
        // Line A's outage cost nothing: B had every packet.
        assert!(lost_a_only > 100, "{lost_a_only}");
        assert_eq!(gaps_before_burst, Some(0));
        // The 3-packet burst on both lines is one channel gap.
        assert_eq!(c.channel_gaps, 1);
        assert!(c.channel_messages_lost >= 3);
        // One session change per cycle.
        assert_eq!(c.session_changes, 1);
        assert_eq!(p.phase(), Phase::Normal, "a new cycle has begun");
    }
}

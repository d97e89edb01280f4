//! The daemon: wires feeds, the gate server, metrics and the fills lane
//! together (I/O).
//!
//! Start order, each step failing cleanly before the next: config (exit 2
//! on error, nothing started), interface names resolved (exit 2), metrics
//! address bound, every feed's lines joined and its thread started, the
//! gate socket bound; then `READY=1`. The control loop (main thread, a
//! single-threaded tokio runtime) serves `/metrics`, handles signals
//! (SIGTERM/SIGINT stop, SIGHUP reloads thresholds) and pings the systemd
//! watchdog while every feed thread makes progress.

pub mod demo;
pub mod demo_cme;
pub mod demo_itch;
pub mod demo_pitch;
pub mod feeds;
pub mod fills_lane;
pub mod logging;
pub mod notify;
pub mod preflight;
pub mod shm;
pub mod watchdog;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use crossbeam_channel::Sender;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::config::{Config, ConfigError, ServerMode};
use crate::gate::server::{self, Gate, GateStats, IoMode, ServerConfig, ServerHandle};
use crate::metrics::{self, Metrics};
use crate::net::receiver::{FeedThread, ReceiverOptions};

use feeds::{Control, FeedWriter};
use notify::Notifier;
use watchdog::{Beat, Watchdog};

/// Exit code of a config that cannot be used (nothing was started).
pub const EXIT_CONFIG: i32 = 2;
/// Exit code of a failure at run time (systemd restarts the service).
pub const EXIT_FAILURE: i32 = 1;

/// A feed thread stalled for this long stops the watchdog pings. Feed
/// threads beat at least every 100 ms (the receiver's poll timeout).
const STALL_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The config file (config/tickgate.toml is a commented example).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: PathBuf,
    /// Only check the config file, against this host too (interfaces,
    /// directories): exit 0 when `run` would accept it, 2 (every problem on
    /// standard error) when not. Nothing is started or created.
    #[arg(long)]
    pub check_config: bool,
}

/// Prints each problem of a refused config on its own line.
pub fn report_config_error(path: &std::path::Path, e: &ConfigError) {
    for p in e.problems() {
        crate::util::errors::say(format_args!("tickgate: config {}: {p}", path.display()));
    }
}

pub fn run_main(args: RunArgs) -> anyhow::Result<i32> {
    // One validation path for --check-config and run: the file, then the
    // host; whatever either refuses exits 2 before anything starts.
    let config = match Config::load(&args.config).and_then(|c| preflight::check(&c).map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            report_config_error(&args.config, &e);
            return Ok(EXIT_CONFIG);
        }
    };
    let warnings = config.warnings();
    if args.check_config {
        for w in &warnings {
            crate::util::errors::say(format_args!(
                "tickgate: config {}: warning: {w}",
                args.config.display()
            ));
        }
        println!(
            "{}: valid ({}, {})",
            args.config.display(),
            crate::text::plural(config.feeds.len() as u64, "feed"),
            crate::text::plural(
                config
                    .feeds
                    .iter()
                    .map(|f| f.lines.len() as u64)
                    .sum::<u64>(),
                "line"
            )
        );
        println!("{}", gate_rules_line(&config));
        return Ok(0);
    }
    logging::init(&config.log);
    for w in &warnings {
        tracing::warn!(config = %args.config.display(), "{w}");
    }
    let notifier = Notifier::from_env().context("NOTIFY_SOCKET")?;
    let daemon = match Daemon::start(config, Some(args.config.clone()), notifier) {
        Ok(d) => d,
        Err(StartError::Config(e)) => {
            report_config_error(&args.config, &e);
            return Ok(EXIT_CONFIG);
        }
        Err(StartError::Other(e)) => {
            tracing::error!(error = %crate::util::errors::chain(&e), "start failed");
            crate::util::errors::say(format_args!("tickgate: {}", crate::util::errors::chain(&e)));
            return Ok(EXIT_FAILURE);
        }
    };
    Ok(daemon.run(RunOptions::default()))
}

/// `--check-config`'s line on the `[gate]` rules of a symbol on several
/// feeds (gate.md "One symbol on several feeds"), with the symbols the
/// config itself names in more than one feed.
fn gate_rules_line(config: &Config) -> String {
    let rules = &config.gate.rules;
    let mut feeds_of: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for f in &config.feeds {
        for s in &f.symbols {
            feeds_of
                .entry(s.symbol.to_string())
                .or_default()
                .push(&f.name);
        }
    }
    let shared: Vec<String> = feeds_of
        .into_iter()
        .filter(|(_, feeds)| feeds.len() > 1)
        .map(|(sym, feeds)| format!("{sym} ({})", feeds.join(", ")))
        .collect();
    format!(
        "gate: across = \"{}\", crossed_ms = {}{}",
        rules.across.as_str(),
        rules.crossed_ns / 1_000_000,
        if shared.is_empty() {
            String::new()
        } else {
            format!("; configured on several feeds: {}", shared.join(", "))
        }
    )
}

pub use demo::{demo_main, DemoArgs};

/// Why the daemon did not start.
#[derive(Debug)]
pub enum StartError {
    /// The config names something that does not exist (exit 2).
    Config(ConfigError),
    /// Binding, joining or spawning failed (exit 1).
    Other(anyhow::Error),
}

impl From<anyhow::Error> for StartError {
    fn from(e: anyhow::Error) -> Self {
        StartError::Other(e)
    }
}

struct RunningFeed {
    name: String,
    thread: FeedThread<FeedWriter>,
    control: Sender<Control>,
}

/// A started daemon: every feed receiving, the gate socket listening, the
/// metrics address bound.
pub struct Daemon {
    config: Config,
    config_path: Option<PathBuf>,
    notifier: Notifier,
    feeds: Vec<RunningFeed>,
    beats: Vec<Arc<Beat>>,
    gate: Option<ServerHandle>,
    gate_backend: Gate,
    /// The shared state file the feed tables live in (`[gate] shm`).
    shm: Option<shm::Published>,
    metrics: Arc<Metrics>,
    metrics_addr: Option<SocketAddr>,
    metrics_stop: Option<tokio::sync::oneshot::Sender<()>>,
    metrics_task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    signals: Option<Signals>,
    fills: Option<fills_lane::FillsLane>,
    /// Taken by `run` while the control loop runs.
    rt: Option<tokio::runtime::Runtime>,
}

struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

/// A periodic callback of the control loop.
pub type TickFn<'a> = Box<dyn FnMut(&Daemon) + 'a>;

/// What the control loop does besides its own duties.
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Called every so often (the demo's status line).
    pub on_tick: Option<(Duration, TickFn<'a>)>,
    /// Stop by itself after this long (the demo's `--seconds`).
    pub stop_after: Option<Duration>,
}

impl Daemon {
    /// Starts everything; on error, whatever was started is stopped again.
    pub fn start(
        config: Config,
        config_path: Option<PathBuf>,
        notifier: Notifier,
    ) -> Result<Daemon, StartError> {
        config.validate().map_err(StartError::Config)?;
        preflight::check(&config).map_err(StartError::Config)?;
        // Names first: a missing interface is a config error, found before
        // any socket exists.
        let mut specs = Vec::with_capacity(config.feeds.len());
        for (i, f) in config.feeds.iter().enumerate() {
            specs.push(feeds::line_specs(i, f).map_err(StartError::Config)?);
        }
        // The control loop alone needs one thread; the fills lane gets two
        // workers of its own.
        let rt = match &config.fills {
            None => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            Some(_) => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("fills")
                .enable_all()
                .build(),
        }
        .context("starting the control runtime")?;
        let signals = {
            let _guard = rt.enter();
            Signals {
                term: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
                int: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
                hup: signal(SignalKind::hangup()).context("installing SIGHUP handler")?,
            }
        };
        let gate_stats = Arc::new(GateStats::default());
        let names: Vec<(&str, Vec<&str>)> = config
            .feeds
            .iter()
            .map(|f| {
                (
                    f.name.as_str(),
                    f.lines.iter().map(|l| l.name.as_str()).collect(),
                )
            })
            .collect();
        let metrics = Arc::new(
            Metrics::new(&names, Arc::clone(&gate_stats)).context("building the metrics")?,
        );
        let listener = match config.metrics.listen {
            Some(addr) => Some(
                rt.block_on(metrics::bind(addr))
                    .with_context(|| format!("binding the metrics address {addr}"))?,
            ),
            None => None,
        };
        let metrics_addr = listener.as_ref().and_then(|l| l.local_addr().ok());

        let (published, regions) = match &config.gate.shm {
            None => (None, Vec::new()),
            Some(path) => {
                let specs: Vec<_> = config
                    .feeds
                    .iter()
                    .map(|f| crate::feed::shm::FeedSpec {
                        name: f.name.clone(),
                        capacity: f
                            .max_symbols
                            .saturating_mul(f.venue.slots_per_symbol())
                            .min(u32::MAX as usize - 1) as u32,
                        stale_ms: f.stale_ms,
                        source_max_age_ms: f.source_max_age_ms,
                        units: f.venue.unit_cells() as u32,
                    })
                    .collect();
                let (p, r) =
                    shm::publish_with_rules(path, shm::DEFAULT_MODE, &specs, &config.gate.rules)
                        .with_context(|| {
                            format!("publishing the shared state file {}", path.display())
                        })?;
                (Some(p), r)
            }
        };

        let mut running = Vec::with_capacity(config.feeds.len());
        let mut beats = Vec::new();
        let mut readers = Vec::new();
        let mut links = Vec::new();
        for (i, ((f, lines), fm)) in config
            .feeds
            .iter()
            .zip(&specs)
            .zip(&metrics.feeds)
            .enumerate()
        {
            let (feed, reader) = feeds::build_in(f, regions.get(i));
            let beat = Beat::new(&format!("feed-{}", f.name));
            let (mut writer, control) = FeedWriter::new(feed, Arc::clone(fm), Arc::clone(&beat));
            if let Some(snap) = &f.snapshot {
                let mut opts = crate::net::glimpse::GlimpseOptions::new(
                    snap.address,
                    &snap.username,
                    &snap.password,
                );
                opts.max_bytes = crate::config::mib(snap.max_mib);
                let client = crate::net::glimpse::GlimpseClient::spawn(&f.name, opts)
                    .with_context(|| format!("feed {}: starting the GLIMPSE client", f.name))?;
                writer.set_glimpse(client);
            }
            if let Some(grp) = &f.grp {
                let opts = crate::net::grp::GrpOptions::new(grp.address, grp.login);
                let client =
                    crate::net::grp::GrpClient::spawn(&f.name, opts).with_context(|| {
                        format!("feed {}: starting the Gap Request Proxy client", f.name)
                    })?;
                writer.set_grp(client);
            }
            if let Some(spin) = &f.spin {
                // R5c: one client per feed, an attempt thread per unit
                // of `spin.servers` (attempts of different units run at
                // the same time).
                let mut opts = crate::net::spin::SpinOptions::new(spin.login);
                opts.max_bytes = crate::config::mib(spin.max_mib);
                let units: Vec<u8> = spin.servers.iter().map(|(u, _)| *u).collect();
                let client = crate::net::spin::SpinClient::spawn(&f.name, opts, &units)
                    .with_context(|| format!("feed {}: starting the Spin client", f.name))?;
                writer.set_spin(client, spin.servers.clone());
            }
            // R4c, R5c: `STATUS` lists the GRP connection and the spins.
            if let Some(l) = writer.links() {
                links.push((i, l));
            }
            // On error the feeds already running are stopped by drop.
            let opts = ReceiverOptions {
                busy_poll: f.busy_poll,
                cpu: f.cpu,
                fifo_priority: f.fifo_priority,
                rerequest: f.rerequest.clone(),
                ..ReceiverOptions::default()
            };
            let thread = FeedThread::spawn(&f.name, lines, opts, writer)?;
            let _ = fm.sockets.set(thread.stats());
            tracing::info!(
                feed = f.name.as_str(),
                lines = %lines
                    .iter()
                    .map(|l| format!("{}={}:{} via {}", l.name, l.group, l.port, l.interface))
                    .collect::<Vec<_>>()
                    .join(" "),
                "feed joined"
            );
            readers.push((f.name.clone(), reader));
            beats.push(beat);
            running.push(RunningFeed {
                name: f.name.clone(),
                thread,
                control,
            });
        }
        let mut gate_backend = Gate::with_rules(readers, config.gate.rules);
        for (i, l) in links {
            gate_backend.set_links(i, l);
        }
        let server_config = ServerConfig {
            path: config.gate.socket.clone(),
            mode: config.gate.socket_mode,
            io: match config.gate.server_mode {
                ServerMode::Blocking => IoMode::Blocking,
                ServerMode::Epoll => IoMode::Epoll,
                ServerMode::BusyPoll => IoMode::BusyPoll,
            },
            cpu: config.gate.cpu,
            max_connections: config.gate.max_connections,
            max_connections_per_uid: config.gate.max_connections_per_uid,
        };
        let gate = server::serve_with_stats(&server_config, gate_backend.clone(), gate_stats)
            .with_context(|| {
                format!("starting the gate socket {}", config.gate.socket.display())
            })?;

        // The HTTP listeners' connection caps stay below the open-file
        // limit (raised to its hard limit), with room for every gate
        // connection: the HTTP side cannot take the gate's descriptors.
        let nofile = crate::http_limits::raise_nofile();
        let mut fills_cfg = config.fills.clone();
        let mut metrics_limits = config.metrics.limits.clone();
        {
            let mut caps: Vec<&mut usize> = vec![&mut metrics_limits.max_connections];
            if let Some(f) = fills_cfg.as_mut() {
                caps.push(&mut f.http.limits.max_connections);
            }
            crate::http_limits::cap_below_nofile(nofile, config.gate.max_connections, &mut caps);
        }
        let limited = crate::http_limits::LimitStats::family(&metrics.registry)
            .context("registering the HTTP limit metrics")?;
        let fills = match &fills_cfg {
            Some(cfg) => Some(rt.block_on(fills_lane::FillsLane::start(
                cfg,
                &metrics.registry,
                &limited,
            ))?),
            None => None,
        };

        let (metrics_stop, metrics_task) = match listener {
            Some(l) => {
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                let stats = crate::http_limits::LimitStats::of(&limited, "metrics");
                let task = rt.spawn(metrics::serve(
                    l,
                    Arc::clone(&metrics),
                    metrics_limits,
                    stats,
                    async move {
                        let _ = rx.await;
                    },
                ));
                (Some(tx), Some(task))
            }
            None => (None, None),
        };
        Ok(Daemon {
            config,
            config_path,
            notifier,
            feeds: running,
            beats,
            gate: Some(gate),
            gate_backend,
            shm: published,
            metrics,
            metrics_addr,
            metrics_stop,
            metrics_task,
            signals: Some(signals),
            fills,
            rt: Some(rt),
        })
    }

    /// The shared state file, when published.
    pub fn shm(&self) -> Option<&shm::Published> {
        self.shm.as_ref()
    }

    /// The lock-free view the gate socket answers from.
    pub fn gate(&self) -> &Gate {
        &self.gate_backend
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Where `/metrics` is served (the bound address, when the config
    /// asked for port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where the fills lane's HTTP API listens, when the lane is on.
    pub fn fills_addr(&self) -> Option<SocketAddr> {
        self.fills.as_ref().map(|f| f.http_addr)
    }

    /// Reports ready, then runs the control loop until SIGTERM/SIGINT (or
    /// `stop_after`), and stops everything. Returns the exit code.
    pub fn run(mut self, mut opts: RunOptions<'_>) -> i32 {
        let ready = format!(
            "{} joined, gate socket {}",
            crate::text::plural(self.feeds.len() as u64, "feed"),
            self.config.gate.socket.display()
        );
        self.metrics.health.ready.store(true, Ordering::Relaxed);
        if let Err(e) = self.notifier.ready(&ready) {
            tracing::warn!(error = %e, "sd_notify READY failed");
        }
        tracing::info!(
            metrics = ?self.metrics_addr,
            systemd = self.notifier.is_enabled(),
            "{ready}; ready"
        );
        let wd_timeout = notify::watchdog_timeout();
        let mut watchdog = Watchdog::new(self.beats.clone(), STALL_AFTER, Instant::now());
        let rt = self.rt.take().expect("run once");
        let mut signals = self.signals.take().expect("run once");
        let code = {
            let mut stalled_logged = false;
            rt.block_on(async {
                let mut wd_tick = tokio::time::interval(watchdog::ping_interval(wd_timeout));
                wd_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let tick_every = opts
                    .on_tick
                    .as_ref()
                    .map_or(Duration::from_secs(3600), |t| t.0);
                // The first tick after one period, not at once.
                let mut user_tick = tokio::time::interval_at(
                    tokio::time::Instant::now() + tick_every,
                    tick_every,
                );
                user_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let deadline = async {
                    match opts.stop_after {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        _ = signals.term.recv() => {
                            tracing::info!("SIGTERM: stopping");
                            break 0;
                        }
                        _ = signals.int.recv() => {
                            tracing::info!("SIGINT: stopping");
                            break 0;
                        }
                        _ = signals.hup.recv() => reload(
                            &mut self.config,
                            self.config_path.as_deref(),
                            &self.notifier,
                            &self.feeds,
                        ),
                        _ = wd_tick.tick() => {
                            if let Some(f) = self.feeds.iter().find(|f| f.thread.is_finished()) {
                                tracing::error!(feed = f.name.as_str(), "feed thread ended unexpectedly");
                                break EXIT_FAILURE;
                            }
                            match watchdog.check(Instant::now()) {
                                Ok(()) => {
                                    self.metrics.health.stalled.store(false, Ordering::Relaxed);
                                    stalled_logged = false;
                                    // Pings only when systemd asked for them.
                                    if wd_timeout.is_some() {
                                        if let Err(e) = self.notifier.watchdog() {
                                            tracing::warn!(error = %e, "sd_notify WATCHDOG failed");
                                        }
                                    }
                                }
                                Err(names) => {
                                    // No ping: systemd restarts us if it lasts.
                                    self.metrics.health.stalled.store(true, Ordering::Relaxed);
                                    if !stalled_logged {
                                        tracing::error!(threads = %names.join(", "), "worker thread stalled; withholding watchdog pings");
                                        stalled_logged = true;
                                    }
                                }
                            }
                        }
                        _ = user_tick.tick(), if opts.on_tick.is_some() => {
                            if let Some((_, f)) = opts.on_tick.as_mut() {
                                f(&self);
                            }
                        }
                        _ = &mut deadline => break 0,
                    }
                }
            })
        };
        self.rt = Some(rt);
        self.shutdown();
        code
    }

    /// Stops in reverse order: the gate first (no answers from a feed that
    /// is going away), then the feeds, then the metrics endpoint.
    fn shutdown(&mut self) {
        if let Err(e) = self.notifier.stopping() {
            tracing::warn!(error = %e, "sd_notify STOPPING failed");
        }
        self.metrics.health.stopping.store(true, Ordering::Relaxed);
        if let Some(g) = self.gate.take() {
            g.stop();
        }
        if let (Some(lane), Some(rt)) = (self.fills.take(), self.rt.as_ref()) {
            // Batches in flight commit before the process ends.
            if rt
                .block_on(async {
                    tokio::time::timeout(Duration::from_secs(10), lane.stop()).await
                })
                .is_err()
            {
                tracing::warn!("fills lane did not stop within 10 s");
            }
        }
        for f in self.feeds.drain(..) {
            if let Err(e) = f.thread.stop() {
                tracing::error!(feed = f.name.as_str(), error = %crate::util::errors::chain(&e), "feed thread failed");
            }
        }
        if let Some(p) = self.shm.take() {
            // Clients keep the mapping; their quotes age from here.
            p.stop();
        }
        if let Some(tx) = self.metrics_stop.take() {
            let _ = tx.send(());
        }
        if let (Some(task), Some(rt)) = (self.metrics_task.take(), self.rt.as_ref()) {
            let _ = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), task).await });
        }
        tracing::info!("stopped");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.gate.is_some() || !self.feeds.is_empty() {
            self.shutdown();
        }
    }
}

/// SIGHUP: re-reads the config and sends new thresholds to the feed
/// threads, which apply them between datagrams; the feeds' state is
/// untouched. Anything else that changed is logged and needs a restart. A
/// config that does not validate is refused as a whole.
fn reload(
    current: &mut Config,
    path: Option<&std::path::Path>,
    notifier: &Notifier,
    feeds: &[RunningFeed],
) {
    let Some(path) = path else {
        tracing::warn!("SIGHUP: no config file to reload");
        return;
    };
    let _ = notifier.reloading();
    match Config::load(path) {
        Err(e) => {
            tracing::error!(error = %e, path = %path.display(), "reload refused; the running config stays");
        }
        Ok(new) => {
            let plan = current.reload_plan(&new);
            for key in &plan.needs_restart {
                tracing::warn!(
                    key = key.as_str(),
                    "changed in the config file; takes effect at the next restart"
                );
            }
            for (feed, symbols) in &plan.added_symbols {
                tracing::info!(feed = current.feeds[*feed].name.as_str(), symbols = %symbols.join(","), "symbols added by reload");
            }
            for t in plan.thresholds {
                let i = t.feed;
                let f = &mut current.feeds[i];
                f.stale_ms = t.stale_ms;
                f.source_max_age_ms = t.source_max_age_ms;
                f.symbols = t.symbols.clone();
                if feeds[i].control.send(Control::Thresholds(t)).is_err() {
                    tracing::error!(
                        feed = feeds[i].name.as_str(),
                        "feed thread gone; thresholds not applied"
                    );
                }
            }
            tracing::info!(path = %path.display(), "config reloaded");
        }
    }
    let _ = notifier.ready("reloaded");
}

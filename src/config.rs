//! The TOML config file (`config/tickgate.toml` is the commented example).
//!
//! Parsing and validation only: no sockets are opened and no names are
//! resolved here, so a bad file is refused before anything starts. Every
//! error names the key path it is about (`feed[0].line[1].group: 10.0.0.1
//! is not a multicast address`), which is why the file is walked by hand
//! over a `toml::Table` rather than deserialized by serde: serde's errors
//! carry a line number but not the key, and lose the array index.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use crate::fills::config::FillsConfig;
use crate::venue::cboe_pitch::session::{CredentialError, Login};
use crate::venue::{LineKind, VenueKind};
use crate::wire::Symbol;

/// Defaults of `semantics.md`.
pub const DEFAULT_STALE_MS: u64 = 500;
pub const DEFAULT_SOURCE_MAX_AGE_MS: u64 = 2000;
pub const DEFAULT_MAX_SEQ_JUMP: u64 = 1_000_000;
/// Default bound on the symbols one feed tracks (the table is
/// preallocated): the core's own default.
pub const DEFAULT_MAX_SYMBOLS: usize = 100_000;
/// recovery.md "Settings".
pub const DEFAULT_VENUE_GAP_HOLD_US: u64 = 1000;
pub const DEFAULT_GAP_HOLD_PACKETS: usize = 10_000;
pub const DEFAULT_REREQUEST_TIMEOUT_MS: u64 = 50;
pub const DEFAULT_REREQUEST_ATTEMPTS: u32 = 3;
/// A hold longer than a minute is a misunderstanding of the setting.
const MAX_GAP_HOLD_US: u64 = 60_000_000;
/// Held datagrams are copied (up to a datagram each): about 1.5 KB each.
const MAX_GAP_HOLD_PACKETS: u64 = 1_000_000;
const MAX_REREQUEST_SERVERS: usize = 16;

/// venues.md: venue feeds' default `stale_ms`.
pub const DEFAULT_VENUE_STALE_MS: u64 = 1500;
/// venues.md: nasdaq-itch `max_orders` default.
pub const DEFAULT_MAX_ORDERS: usize = 10_000_000;
/// gate.md: default socket path and mode.
pub const DEFAULT_SOCKET: &str = "/run/tickgate/gate.sock";
pub const DEFAULT_SOCKET_MODE: u32 = 0o660;
/// The shared state file's name, next to the socket unless `[gate] shm`
/// says otherwise (docs/shm.md).
pub const DEFAULT_SHM_NAME: &str = "state.shm";
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9477";

/// Largest threshold accepted: a day. Anything larger is a typo (seconds
/// vs milliseconds), not a policy.
const MAX_THRESHOLD_MS: u64 = 86_400_000;
/// Hard upper bound on `max_symbols`, to catch typos that would preallocate gigabytes.
const MAX_MAX_SYMBOLS: u64 = 1 << 20;
/// The order table is allocated up front (lazily touched pages): 2^28
/// orders is already several GiB of address space.
const MAX_MAX_ORDERS: u64 = 1 << 28;
/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// The whole validated config.
#[derive(Debug, Clone)]
pub struct Config {
    pub feeds: Vec<FeedConfig>,
    pub gate: GateConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
    /// The reliable lane: `Some` when a `[fills]` section is present and
    /// its `enabled` switch (default true) is on.
    pub fills: Option<FillsConfig>,
    /// The `[fills]` section as written, to tell whether a reload changed it.
    pub fills_section: Option<Table>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedMode {
    Full,
    Delta,
}

/// C4: whether the channel's liveness counts for verified symbols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Symbol,
    Channel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockOffset {
    /// Estimated from `arrival - source_ts` samples (semantics.md).
    Auto,
    /// Zero.
    Off,
    /// Fixed by the operator, in milliseconds (may be negative).
    FixedMs(i64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct FeedConfig {
    pub name: String,
    /// The venue the feed speaks (venues.md; default `tickgate`).
    pub venue: VenueKind,
    /// nasdaq-itch: live orders the order table holds.
    pub max_orders: usize,
    /// cme-mdp3: entries kept for instruments waiting for a snapshot.
    pub recovery_entries: usize,
    /// Ignored on venue feeds (`mode` does not apply to them).
    pub mode: FeedMode,
    pub liveness: Liveness,
    pub stale_ms: u64,
    pub source_max_age_ms: u64,
    pub max_seq_jump: u64,
    /// C3b: a channel sequence this far beyond `next` is not believed.
    pub max_channel_jump: u64,
    /// recovery.md "Settings".
    pub gap_hold_us: u64,
    pub gap_hold_packets: usize,
    /// R4: MoldUDP64 re-request servers, asked in turn.
    pub rerequest: Vec<SocketAddr>,
    pub rerequest_timeout_ms: u64,
    pub rerequest_attempts: u32,
    /// R2: the longest a hole stays open, progress or not.
    pub max_hole_ms: u64,
    /// R5: the GLIMPSE 5.0 server of a nasdaq-itch feed.
    pub snapshot: Option<SnapshotConfig>,
    /// R4c: the Gap Request Proxy of a cboe-pitch feed.
    pub grp: Option<GrpConfig>,
    /// R5c: the Spin Servers of a cboe-pitch feed's units.
    pub spin: Option<SpinConfig>,
    pub clock_offset: ClockOffset,
    pub max_symbols: usize,
    pub lines: Vec<LineConfig>,
    /// Per-symbol threshold overrides (and symbols that exist from the
    /// start because the config names them), sorted by symbol.
    pub symbols: Vec<SymbolConfig>,
    /// The feed thread spins on non-blocking reads instead of sleeping in
    /// epoll: lowest latency, one core busy.
    pub busy_poll: bool,
    /// Pin the feed thread to this CPU.
    pub cpu: Option<usize>,
    /// Run the feed thread SCHED_FIFO at this priority (1-99): on a host
    /// whose cores other work saturates, the thread that empties the
    /// socket buffers is scheduled first, so the kernel does not drop.
    pub fifo_priority: Option<i32>,
}

impl FeedConfig {
    /// A feed with the defaults of `semantics.md` and no lines.
    pub fn new(name: &str, mode: FeedMode) -> FeedConfig {
        FeedConfig {
            name: name.to_string(),
            venue: VenueKind::Tickgate,
            max_orders: DEFAULT_MAX_ORDERS,
            recovery_entries: crate::venue::cme_mdp3::recovery::DEFAULT_RECOVERY_ENTRIES,
            mode,
            liveness: Liveness::Symbol,
            stale_ms: DEFAULT_STALE_MS,
            source_max_age_ms: DEFAULT_SOURCE_MAX_AGE_MS,
            max_seq_jump: DEFAULT_MAX_SEQ_JUMP,
            max_channel_jump: crate::feed::channel::DEFAULT_MAX_CHANNEL_JUMP,
            gap_hold_us: 0,
            gap_hold_packets: DEFAULT_GAP_HOLD_PACKETS,
            rerequest: Vec::new(),
            rerequest_timeout_ms: DEFAULT_REREQUEST_TIMEOUT_MS,
            rerequest_attempts: DEFAULT_REREQUEST_ATTEMPTS,
            max_hole_ms: crate::feed::settings::DEFAULT_MAX_HOLE_MS,
            snapshot: None,
            grp: None,
            spin: None,
            clock_offset: ClockOffset::Auto,
            max_symbols: DEFAULT_MAX_SYMBOLS,
            lines: Vec::new(),
            symbols: Vec::new(),
            busy_poll: false,
            fifo_priority: None,
            cpu: None,
        }
    }

    /// The core's settings for this feed.
    pub fn feed_settings(&self) -> crate::feed::FeedSettings {
        use crate::feed::{ClockOffset as C, Liveness as L, Mode};
        crate::feed::FeedSettings {
            mode: match self.mode {
                FeedMode::Full => Mode::Full,
                FeedMode::Delta => Mode::Delta,
            },
            liveness: match self.liveness {
                Liveness::Symbol => L::Symbol,
                Liveness::Channel => L::Channel,
            },
            stale_ms: self.stale_ms,
            source_max_age_ms: self.source_max_age_ms,
            max_seq_jump: self.max_seq_jump,
            clock_offset: match self.clock_offset {
                ClockOffset::Auto => C::Auto,
                ClockOffset::Off => C::Off,
                ClockOffset::FixedMs(ms) => C::FixedNs(ms.saturating_mul(1_000_000)),
            },
            max_symbols: self.max_symbols,
            venue: crate::venue::VenueSettings {
                kind: self.venue,
                max_orders: self.max_orders,
                recovery_entries: self.recovery_entries,
                // docs/venues.md "Tables in replay": not on a live feed.
                replay_tables: false,
            },
            max_channel_jump: self.max_channel_jump,
            recovery: crate::feed::Recovery {
                gap_hold_us: self.gap_hold_us,
                gap_hold_packets: self.gap_hold_packets,
                rerequest_servers: self.rerequest.len(),
                gap_proxy: self.grp.as_ref().map(|g| g.max_count),
                rerequest_timeout_ms: self.rerequest_timeout_ms,
                rerequest_attempts: self.rerequest_attempts,
                max_hole_ms: self.max_hole_ms,
                snapshot: self.snapshot.is_some(),
                snapshot_hold_bytes: match (&self.snapshot, &self.spin) {
                    (Some(s), _) => mib(s.hold_mib),
                    // R5c: the spin's hold bound, per attempt.
                    (None, Some(s)) => mib(s.hold_mib),
                    (None, None) => crate::feed::settings::DEFAULT_SNAPSHOT_HOLD_BYTES,
                },
                // R5c: the units whose Spin Server is configured.
                spin_units: self
                    .spin
                    .iter()
                    .flat_map(|s| s.servers.iter().map(|&(unit, _)| unit))
                    .collect(),
            },
        }
    }

    /// The thresholds in force for `symbol` (override, else the feed's).
    pub fn thresholds_for(&self, symbol: Symbol) -> Thresholds {
        let base = Thresholds {
            stale_ms: self.stale_ms,
            source_max_age_ms: self.source_max_age_ms,
        };
        match self.symbols.iter().find(|s| s.symbol == symbol) {
            Some(s) => Thresholds {
                stale_ms: s.stale_ms.unwrap_or(base.stale_ms),
                source_max_age_ms: s.source_max_age_ms.unwrap_or(base.source_max_age_ms),
            },
            None => base,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub stale_ms: u64,
    pub source_max_age_ms: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LineConfig {
    pub name: String,
    /// An IPv4 multicast group (224.0.0.0/4).
    pub group: Ipv4Addr,
    pub port: u16,
    /// Where to join; `None` lets the kernel choose by route.
    pub interface: Option<InterfaceSpec>,
    /// Source-specific multicast: only this sender is accepted.
    pub source: Option<Ipv4Addr>,
    /// SO_RCVBUF in bytes (the kernel doubles it and caps it at rmem_max).
    pub rcvbuf: Option<usize>,
    /// What the line carries (venues.md `cme-mdp3`, Lines; default
    /// incremental, the only kind of the other venues).
    pub kind: LineKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterfaceSpec {
    /// An interface name (`eth0`), resolved when the daemon starts.
    Name(String),
    /// The address of a local interface.
    Addr(Ipv4Addr),
}

impl fmt::Display for InterfaceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterfaceSpec::Name(n) => f.write_str(n),
            InterfaceSpec::Addr(a) => write!(f, "{a}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolConfig {
    pub symbol: Symbol,
    pub stale_ms: Option<u64>,
    pub source_max_age_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerMode {
    /// A thread per connection, blocking in read: no CPU burnt while idle.
    Blocking,
    /// One thread in a blocking epoll_wait for every connection.
    Epoll,
    /// A thread spins on non-blocking sockets: lowest latency, one core.
    BusyPoll,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GateConfig {
    pub socket: PathBuf,
    /// File mode of the socket (who may ask).
    pub socket_mode: u32,
    pub server_mode: ServerMode,
    /// Pin the server thread to this CPU.
    pub cpu: Option<usize>,
    /// Connections beyond this are refused (and counted).
    pub max_connections: usize,
    /// Connections of one peer user (SO_PEERCRED) beyond this are refused;
    /// default three quarters of `max_connections`.
    pub max_connections_per_uid: usize,
    /// The shared state file (`shm = "<path>"`, or `false`: none). By
    /// default `state.shm` in the socket's directory.
    pub shm: Option<PathBuf>,
    /// `across` and `crossed_ms`: a symbol on several feeds (gate.md "One
    /// symbol on several feeds").
    pub rules: crate::feed::across::GateRules,
}

/// `state.shm` next to `socket`.
pub fn default_shm(socket: &std::path::Path) -> PathBuf {
    socket
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(DEFAULT_SHM_NAME)
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            socket_mode: DEFAULT_SOCKET_MODE,
            server_mode: ServerMode::Blocking,
            cpu: None,
            max_connections: 1024,
            shm: Some(default_shm(std::path::Path::new(DEFAULT_SOCKET))),
            max_connections_per_uid: 768,
            rules: crate::feed::across::GateRules::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConfig {
    /// `None` when `[metrics] enabled = false`.
    pub listen: Option<SocketAddr>,
    /// A non-loopback `listen` needs this (there is no authentication).
    pub allow_remote: bool,
    /// Timeouts and connection cap of the metrics listener.
    pub limits: crate::http_limits::HttpLimits,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: Some(DEFAULT_METRICS_LISTEN.parse().expect("valid default")),
            allow_remote: false,
            limits: crate::http_limits::HttpLimits::metrics_default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub format: LogFormat,
    /// An `EnvFilter` directive (`info`, `tickgate=debug,warn`); `RUST_LOG`
    /// overrides it when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Human,
            level: "info".to_string(),
        }
    }
}

/// A config that cannot be used. `Display` is the one line shown to the user
/// (one line per problem for [`ConfigError::Several`]); callers put the
/// file's name in front, so no variant repeats it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read: {message}")]
    Read { path: String, message: String },
    #[error("{message}")]
    Syntax { message: String },
    /// `key` is the key path (`feed[0].line[1].group`).
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
    /// Every problem found, in file order (never fewer than two).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }

    /// The key path this error is about, when it is about one (the
    /// first problem's, for several).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::Several(all) => all.first().and_then(|e| e.key()),
            _ => None,
        }
    }

    /// Each problem on its own (one line each).
    pub fn problems(&self) -> Vec<&ConfigError> {
        match self {
            ConfigError::Several(all) => all.iter().flat_map(|e| e.problems()).collect(),
            e => vec![e],
        }
    }

    /// `Ok` for no problem, the problem for one, `Several` for more.
    pub fn from_all(mut all: Vec<ConfigError>) -> Result<()> {
        match all.len() {
            0 => Ok(()),
            1 => Err(all.pop().expect("one")),
            _ => Err(ConfigError::Several(all)),
        }
    }
}

/// Problems found while walking the file: the walk goes on after a
/// problem so that every one is reported, not only the first.
type Sink = RefCell<Vec<ConfigError>>;

/// Records `r`'s error, if any, and goes on without the value.
fn keep<T>(sink: &Sink, r: Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            sink.borrow_mut().push(e);
            None
        }
    }
}

type Result<T> = std::result::Result<T, ConfigError>;

/// Largest config file read (`run`, a reload, `--check-config`): a path
/// pointing at `/dev/zero` or a runaway file must not fill memory.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The text of the config file at `path`, read without blocking on a FIFO
/// (a reload runs on the daemon's control loop): only a regular file of
/// at most `MAX_CONFIG_BYTES` is read.
fn read_config_file(path: &Path) -> std::result::Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "some other kind of file"
        };
        return Err(format!("it is {what}; a config must be a regular file"));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "{} bytes, more than a config may have ({MAX_CONFIG_BYTES})",
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow while read: never more than the bound.
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "more than a config may have ({MAX_CONFIG_BYTES} bytes)"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&c| c == b'\n').count() + 1;
        format!("line {line} is not UTF-8")
    })
}

impl Config {
    /// What a valid config leaves open that an operator should know:
    /// each line of a venue feed without a `source` filter, the one
    /// control against a stranger on the group (recovery.md R1: a planted
    /// datagram is held, and a conflicting copy costs a re-request).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, f) in self.feeds.iter().enumerate() {
            if !f.venue.is_venue_feed() {
                continue;
            }
            for (j, l) in f.lines.iter().enumerate() {
                if l.source.is_none() {
                    out.push(format!(
                        "feed[{i}].line[{j}] (feed {}, line {}): no `source` filter: any sender on {}:{} can plant datagrams (docs/operations.md, \"A stranger on the group\")",
                        f.name, l.name, l.group, l.port
                    ));
                }
            }
        }
        out
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = read_config_file(path).map_err(|message| ConfigError::Read {
            path: path.display().to_string(),
            message,
        })?;
        Config::parse(&text)
    }

    /// Parses and validates config text.
    pub fn parse(text: &str) -> Result<Config> {
        let table: Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            // One line: toml's own Display is a multi-line snippet.
            message: match e.span() {
                Some(span) => {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!(
                        "TOML syntax error at line {line}, column {column}: {}",
                        e.message().trim_end()
                    )
                }
                None => format!("TOML syntax error: {}", e.message().trim_end()),
            },
        })?;
        Config::from_table(&table).map_err(|e| in_file_order(e, text))
    }

    /// Validates a parsed TOML document. Every problem is reported (in
    /// the order the walk meets them; [`Config::parse`] sorts them into
    /// file order).
    pub fn from_table(table: &Table) -> Result<Config> {
        let sink = Sink::default();
        let mut table = table.clone();
        check_keys(&mut table, "", "", &sink);
        let config = Config::walk(&table, &sink);
        ConfigError::from_all(sink.into_inner())?;
        let config = config?;
        config.validate()?;
        Ok(config)
    }

    /// `fills apply --config`: the `[fills]` section of a whole daemon
    /// config file, the file validated as `run` validates it (defaults
    /// without the section).
    pub fn fills_of_file(path: &Path) -> anyhow::Result<FillsConfig> {
        use anyhow::Context;
        let c = Config::load(path).with_context(|| format!("loading {}", path.display()))?;
        Ok(c.fills.unwrap_or_default())
    }

    /// `fills consume --config`: the file's `[fills]` section alone
    /// ([`Config::fills_only`]); a file without it, or with `enabled =
    /// false`, is an error.
    pub fn fills_section_of_file(path: &Path) -> anyhow::Result<FillsConfig> {
        use anyhow::Context;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let doc: Table =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        anyhow::ensure!(
            doc.contains_key("fills"),
            "{} has no [fills] section",
            path.display()
        );
        // Only the [fills] table is read, so the rest of a daemon config
        // file does not matter here; it is read as `run` reads it
        // (`enabled`, key paths in every message).
        Config::fills_only(&doc)
            .map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))?
            .with_context(|| format!("{}: [fills] has enabled = false", path.display()))
    }

    /// The `[fills]` section of a document alone, with the checks and
    /// messages of a whole file (`fills consume` reads only that section;
    /// the rest of the file does not matter to it). `None` when the
    /// section is absent or `enabled = false`.
    pub fn fills_only(doc: &Table) -> Result<Option<FillsConfig>> {
        let sink = Sink::default();
        let mut doc = doc.clone();
        if let Some(Value::Table(fills)) = doc.get_mut("fills") {
            check_keys(fills, "fills", "fills", &sink);
        }
        let mut root = Section::root(&doc, &sink);
        let fills = match root.table("fills")? {
            Some(s) => keep(&sink, parse_fills(s)).flatten(),
            None => None,
        };
        ConfigError::from_all(sink.into_inner())?;
        Ok(fills)
    }

    fn walk(table: &Table, sink: &Sink) -> Result<Config> {
        let mut root = Section::root(table, sink);
        let feeds = root
            .array_of_tables("feed")?
            .into_iter()
            .filter_map(|s| keep(sink, parse_feed(s)))
            .collect::<Vec<_>>();
        let gate = match root.table("gate")? {
            Some(s) => keep(sink, parse_gate(s)).unwrap_or_default(),
            None => GateConfig::default(),
        };
        let metrics = match root.table("metrics")? {
            Some(s) => keep(sink, parse_metrics(s)).unwrap_or_default(),
            None => MetricsConfig::default(),
        };
        let log = match root.table("log")? {
            Some(s) => keep(sink, parse_log(s)).unwrap_or_default(),
            None => LogConfig::default(),
        };
        let fills_section = root.table("fills")?.map(|s| s.table.clone());
        let fills = match root.table("fills")? {
            Some(s) => keep(sink, parse_fills(s)).flatten(),
            None => None,
        };
        root.finish()?;
        Ok(Config {
            feeds,
            gate,
            metrics,
            log,
            fills,
            fills_section,
        })
    }

    /// Rules that span several sections. Also run on configs built in code
    /// (the demo), so they hold for every config the daemon starts with.
    /// Every broken rule is reported.
    pub fn validate(&self) -> Result<()> {
        let mut out = Vec::new();
        if self.feeds.is_empty() && self.fills.is_none() {
            out.push(ConfigError::invalid(
                "feed",
                "no feed configured and the fills lane is off: nothing to run (add a [[feed]] table)",
            ));
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut endpoints: HashMap<(Ipv4Addr, u16, String), String> = HashMap::new();
        // A check looks over every feed (gate.md "One symbol on several
        // feeds"); the state file holds at most as many.
        if self.feeds.len() > crate::feed::across::MAX_FEEDS {
            out.push(ConfigError::invalid(
                "feed",
                format!(
                    "{} feeds configured, at most {}",
                    self.feeds.len(),
                    crate::feed::across::MAX_FEEDS
                ),
            ));
        }
        for (i, feed) in self.feeds.iter().enumerate() {
            let fkey = format!("feed[{i}]");
            if let Some(j) = names.insert(&feed.name, i) {
                out.push(ConfigError::invalid(
                    format!("{fkey}.name"),
                    format!("\"{}\" is already the name of feed[{j}]", feed.name),
                ));
            }
            if feed.lines.is_empty() {
                out.push(ConfigError::invalid(
                    format!("{fkey}.line"),
                    "a feed needs at least one [[feed.line]]",
                ));
            }
            let mut line_names = HashSet::new();
            for (k, line) in feed.lines.iter().enumerate() {
                let lkey = format!("{fkey}.line[{k}]");
                if !line_names.insert(line.name.as_str()) {
                    out.push(ConfigError::invalid(
                        format!("{lkey}.name"),
                        format!("\"{}\" is already a line of this feed", line.name),
                    ));
                }
                // Two lines on one group, port and interface would receive
                // each other's packets: every packet would arrive twice.
                let iface = line
                    .interface
                    .as_ref()
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                let ep = (line.group, line.port, iface);
                let here = format!("{fkey}.line[{k}]");
                if let Some(other) = endpoints.insert(ep, here) {
                    out.push(ConfigError::invalid(
                        lkey,
                        format!(
                            "{}:{} on this interface is already used by {other}",
                            line.group, line.port
                        ),
                    ));
                }
            }
            if feed.symbols.len() > feed.max_symbols {
                out.push(ConfigError::invalid(
                    format!("{fkey}.max_symbols"),
                    format!(
                        "{} is fewer than the {} symbols configured in feed.symbols",
                        feed.max_symbols,
                        feed.symbols.len()
                    ),
                ));
            }
        }
        self.validate_places(&mut out);
        ConfigError::from_all(out)
    }

    /// Two things the daemon would create or bind at one place: refused
    /// here, with the key, rather than at start (exit 1).
    fn validate_places(&self, out: &mut Vec<ConfigError>) {
        if let Some(shm) = &self.gate.shm {
            if shm == &self.gate.socket {
                out.push(ConfigError::invalid(
                    "gate.shm",
                    format!("{} is also gate.socket", shm.display()),
                ));
            }
            if let Some(Ok(crate::fills::config::DbTarget::Sqlite(db))) =
                self.fills.as_ref().map(|f| f.db_target())
            {
                // SQLite's own files beside the database too.
                let taken = ["", "-wal", "-shm", "-journal"].into_iter().find(|suffix| {
                    let mut name = db.as_os_str().to_os_string();
                    name.push(suffix);
                    shm == Path::new(&name)
                });
                if let Some(suffix) = taken {
                    out.push(ConfigError::invalid(
                        "gate.shm",
                        format!(
                            "{} is {} (fills.db)",
                            shm.display(),
                            if suffix.is_empty() {
                                "the fills database".to_string()
                            } else {
                                format!("the fills database's {suffix} file")
                            }
                        ),
                    ));
                }
            }
        }
        if let Some(sock) = self.fills.as_ref().and_then(|f| f.http.socket.as_ref()) {
            let clash = if sock == &self.gate.socket {
                Some("gate.socket")
            } else if self.gate.shm.as_ref() == Some(sock) {
                Some("gate.shm")
            } else {
                None
            };
            if let Some(other) = clash {
                out.push(ConfigError::invalid(
                    "fills.http.socket",
                    format!("{} is also {other}", sock.display()),
                ));
            }
        }
        if let (Some(metrics), Some(fills)) = (self.metrics.listen, &self.fills) {
            if let Ok(http) = fills.http.listen.parse::<SocketAddr>() {
                let overlap = metrics.ip() == http.ip()
                    || metrics.ip().is_unspecified()
                    || http.ip().is_unspecified();
                if metrics.port() != 0 && metrics.port() == http.port() && overlap {
                    out.push(ConfigError::invalid(
                        "metrics.listen",
                        format!("{metrics} is also where fills.http.listen ({http}) binds"),
                    ));
                }
            }
        }
    }

    /// What a reload (SIGHUP) may apply without dropping state: thresholds.
    /// Anything else that changed is listed in `needs_restart` (key paths)
    /// and is not applied.
    pub fn reload_plan(&self, new: &Config) -> ReloadPlan {
        let mut plan = ReloadPlan::default();
        let old_names: Vec<&str> = self.feeds.iter().map(|f| f.name.as_str()).collect();
        let new_names: Vec<&str> = new.feeds.iter().map(|f| f.name.as_str()).collect();
        if old_names != new_names {
            plan.needs_restart
                .push("feed (feeds added, removed or renamed)".into());
        }
        for (i, (old, newf)) in self.feeds.iter().zip(&new.feeds).enumerate() {
            if old.name != newf.name {
                continue;
            }
            let k = format!("feed[{i}]");
            if old.mode != newf.mode {
                plan.needs_restart.push(format!("{k}.mode"));
            }
            if old.venue != newf.venue {
                plan.needs_restart.push(format!("{k}.venue"));
            }
            if old.max_orders != newf.max_orders {
                plan.needs_restart.push(format!("{k}.max_orders"));
            }
            if old.liveness != newf.liveness {
                plan.needs_restart.push(format!("{k}.liveness"));
            }
            if old.max_seq_jump != newf.max_seq_jump {
                plan.needs_restart.push(format!("{k}.max_seq_jump"));
            }
            if old.max_channel_jump != newf.max_channel_jump
                || old.gap_hold_us != newf.gap_hold_us
                || old.gap_hold_packets != newf.gap_hold_packets
                || old.rerequest != newf.rerequest
                || old.rerequest_timeout_ms != newf.rerequest_timeout_ms
                || old.rerequest_attempts != newf.rerequest_attempts
                || old.max_hole_ms != newf.max_hole_ms
                || old.snapshot != newf.snapshot
            {
                plan.needs_restart.push(format!("{k}.recovery"));
            }
            if old.clock_offset != newf.clock_offset {
                plan.needs_restart.push(format!("{k}.clock_offset"));
            }
            if old.max_symbols != newf.max_symbols {
                plan.needs_restart.push(format!("{k}.max_symbols"));
            }
            if old.lines != newf.lines {
                plan.needs_restart.push(format!("{k}.line"));
            }
            if old.busy_poll != newf.busy_poll
                || old.cpu != newf.cpu
                || old.fifo_priority != newf.fifo_priority
            {
                plan.needs_restart
                    .push(format!("{k}.busy_poll/cpu/fifo_priority"));
            }
            let old_syms: HashSet<Symbol> = old.symbols.iter().map(|s| s.symbol).collect();
            let added: Vec<String> = newf
                .symbols
                .iter()
                .filter(|s| !old_syms.contains(&s.symbol))
                .map(|s| s.symbol.to_string())
                .collect();
            if old.stale_ms != newf.stale_ms
                || old.source_max_age_ms != newf.source_max_age_ms
                || old.symbols != newf.symbols
            {
                plan.thresholds.push(FeedThresholds::of(i, newf));
            }
            if !added.is_empty() {
                plan.added_symbols.push((i, added));
            }
        }
        if self.gate != new.gate {
            plan.needs_restart.push("gate".into());
        }
        if self.metrics != new.metrics {
            plan.needs_restart.push("metrics".into());
        }
        if self.log != new.log {
            plan.needs_restart.push("log".into());
        }
        if self.fills_section != new.fills_section {
            plan.needs_restart.push("fills".into());
        }
        plan
    }
}

/// `toml::from_str::<Config>` runs the same validation as [`Config::parse`]
/// (the error text is the one-line message, key path first).
impl<'de> serde::Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Config, D::Error> {
        let table = Table::deserialize(d)?;
        Config::from_table(&table).map_err(serde::de::Error::custom)
    }
}

/// The thresholds of one feed, as a reload applies them.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedThresholds {
    /// Index into `Config::feeds`.
    pub feed: usize,
    pub stale_ms: u64,
    pub source_max_age_ms: u64,
    /// Every override in the new config; symbols not listed fall back to
    /// the feed's thresholds.
    pub symbols: Vec<SymbolConfig>,
}

impl FeedThresholds {
    pub fn of(index: usize, feed: &FeedConfig) -> FeedThresholds {
        FeedThresholds {
            feed: index,
            stale_ms: feed.stale_ms,
            source_max_age_ms: feed.source_max_age_ms,
            symbols: feed.symbols.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReloadPlan {
    pub thresholds: Vec<FeedThresholds>,
    /// Symbols newly named by the config, per feed index (they exist from now on).
    pub added_symbols: Vec<(usize, Vec<String>)>,
    /// Key paths whose change is ignored until a restart.
    pub needs_restart: Vec<String>,
}

// ---------------------------------------------------------------------------
// Sections

fn parse_feed(mut s: Section<'_>) -> Result<FeedConfig> {
    let name = s.required_str("name")?;
    if let Err(p) = check_name(name) {
        return Err(s.err("name", p));
    }
    let venue = match s.str("venue")? {
        None => VenueKind::Tickgate,
        Some(v) => VenueKind::parse(v).ok_or_else(|| {
            s.err(
                "venue",
                format!(
                    "\"{v}\" is not one of: {}",
                    VenueKind::ALL.map(VenueKind::name).join(", ")
                ),
            )
        })?,
    };
    // venues.md: `mode` does not apply to venue feeds (an iex-tops quote
    // is always whole, nasdaq-itch quotes come from the book).
    let mode = if venue.is_venue_feed() {
        if s.get("mode").is_some() {
            return Err(s.err(
                "mode",
                format!("does not apply to {venue} feeds (remove it)"),
            ));
        }
        FeedMode::Full
    } else {
        match s.required_str("mode")? {
            "full" => FeedMode::Full,
            "delta" => FeedMode::Delta,
            other => return Err(s.err("mode", format!("\"{other}\" is not one of: full, delta"))),
        }
    };
    let max_orders = match s.uint("max_orders", 1, MAX_MAX_ORDERS)? {
        Some(_) if !matches!(venue, VenueKind::NasdaqItch | VenueKind::CboePitch) => {
            return Err(s.err(
                "max_orders",
                "applies to nasdaq-itch and cboe-pitch feeds only",
            ))
        }
        Some(n) => n as usize,
        None => DEFAULT_MAX_ORDERS,
    };
    // venues.md: venue feeds default to liveness = "channel", stale_ms = 1500.
    let liveness = match s.str("liveness")? {
        None if venue.is_venue_feed() => Liveness::Channel,
        None | Some("symbol") => Liveness::Symbol,
        Some("channel") => Liveness::Channel,
        Some(other) => {
            return Err(s.err(
                "liveness",
                format!("\"{other}\" is not one of: symbol, channel"),
            ))
        }
    };
    let stale_ms = s
        .uint("stale_ms", 1, MAX_THRESHOLD_MS)?
        .unwrap_or(if venue.is_venue_feed() {
            DEFAULT_VENUE_STALE_MS
        } else {
            DEFAULT_STALE_MS
        });
    let source_max_age_ms = s
        .uint("source_max_age_ms", 1, MAX_THRESHOLD_MS)?
        .unwrap_or(DEFAULT_SOURCE_MAX_AGE_MS);
    let max_seq_jump = s
        .uint("max_seq_jump", 2, u64::MAX >> 1)?
        .unwrap_or(DEFAULT_MAX_SEQ_JUMP);
    // C3b
    let max_channel_jump = s
        .uint("max_channel_jump", 2, u64::MAX >> 1)?
        .unwrap_or(crate::feed::channel::DEFAULT_MAX_CHANNEL_JUMP);
    // recovery.md "Settings": venue feeds hold for the other line by
    // default (1 ms); tickgate's own feeds clear gaps per symbol (S7).
    let gap_hold_us =
        s.uint("gap_hold_us", 0, MAX_GAP_HOLD_US)?
            .unwrap_or(if venue.is_venue_feed() {
                DEFAULT_VENUE_GAP_HOLD_US
            } else {
                0
            });
    let gap_hold_packets = s
        .uint("gap_hold_packets", 1, MAX_GAP_HOLD_PACKETS)?
        .map_or(DEFAULT_GAP_HOLD_PACKETS, |n| n as usize);
    let rerequest = parse_rerequest(&mut s, venue)?;
    let rerequest_timeout_ms = s
        .uint("rerequest_timeout_ms", 1, 60_000)?
        .unwrap_or(DEFAULT_REREQUEST_TIMEOUT_MS);
    let rerequest_attempts = s
        .uint("rerequest_attempts", 1, 1000)?
        .map_or(DEFAULT_REREQUEST_ATTEMPTS, |n| n as u32);
    let max_hole_ms = s
        .uint("max_hole_ms", 1, 3_600_000)?
        .unwrap_or(crate::feed::settings::DEFAULT_MAX_HOLE_MS);
    let snapshot = match s.table("snapshot")? {
        None => None,
        Some(t) if venue == VenueKind::CboePitch => {
            drop(t);
            s.sink.borrow_mut().push(s.err(
                "snapshot",
                "does not apply to cboe-pitch feeds (their units recover from Spin Servers: \
                 use spin)",
            ));
            None
        }
        Some(t) if venue != VenueKind::NasdaqItch => {
            drop(t);
            s.sink.borrow_mut().push(s.err(
                "snapshot",
                "applies to nasdaq-itch feeds only (GLIMPSE 5.0)",
            ));
            None
        }
        Some(t) => keep(s.sink, parse_snapshot(t)),
    };
    // recovery.md Settings: grp and spin on cboe-pitch only.
    let grp = match s.table("grp")? {
        None => None,
        Some(t) if venue != VenueKind::CboePitch => {
            drop(t);
            s.sink.borrow_mut().push(s.err(
                "grp",
                "applies to cboe-pitch feeds only (Cboe's Gap Request Proxy)",
            ));
            None
        }
        Some(t) => keep(s.sink, parse_grp(t)),
    };
    let spin = match s.table("spin")? {
        None => None,
        Some(t) if venue != VenueKind::CboePitch => {
            drop(t);
            s.sink.borrow_mut().push(s.err(
                "spin",
                "applies to cboe-pitch feeds only (Cboe's Spin Servers)",
            ));
            None
        }
        Some(t) => keep(s.sink, parse_spin(t)),
    };
    let clock_offset = match s.get("clock_offset") {
        None => ClockOffset::Auto,
        Some(Value::String(v)) if v == "auto" => ClockOffset::Auto,
        Some(Value::String(v)) if v == "off" => ClockOffset::Off,
        Some(Value::Integer(ms)) => {
            let ms = *ms;
            if ms.unsigned_abs() > MAX_THRESHOLD_MS {
                return Err(s.err(
                    "clock_offset",
                    format!("{ms} ms is more than a day: milliseconds were meant"),
                ));
            }
            ClockOffset::FixedMs(ms)
        }
        Some(other) => {
            return Err(s.err(
                "clock_offset",
                format!(
                    "{} is not \"auto\", \"off\" or a whole number of milliseconds",
                    show(other)
                ),
            ))
        }
    };
    let max_symbols = s
        .uint("max_symbols", 1, MAX_MAX_SYMBOLS)?
        .map_or(DEFAULT_MAX_SYMBOLS, |n| n as usize);
    let mut lines = s
        .array_of_tables("line")?
        .into_iter()
        .filter_map(|l| keep(s.sink, parse_line(l)))
        .collect::<Vec<_>>();
    // venues.md `cme-mdp3`, Lines: CME's channel file instead of lines.
    if let Some(t) = s.table("cme_channel")? {
        if venue != VenueKind::CmeMdp3 {
            drop(t);
            return Err(s.err("cme_channel", "applies to cme-mdp3 feeds only"));
        }
        if !lines.is_empty() {
            drop(t);
            return Err(s.err(
                "cme_channel",
                "give either [[feed.line]] tables or cme_channel, not both",
            ));
        }
        lines = parse_cme_channel(t)?;
    }
    // venues.md `cme-mdp3`, Lines: three kinds there; `cboe-pitch`:
    // realtime and gap; one elsewhere.
    for l in &lines {
        let owner = match l.kind {
            LineKind::Incremental => continue,
            LineKind::Snapshot | LineKind::Definition => VenueKind::CmeMdp3,
            LineKind::Gap => VenueKind::CboePitch,
        };
        if venue != owner {
            s.sink.borrow_mut().push(s.err(
                "line",
                format!(
                    "line {}: kind = \"{}\" applies to {owner} feeds only",
                    l.name,
                    l.kind.name()
                ),
            ));
            break;
        }
    }
    if venue == VenueKind::CboePitch
        && !lines.is_empty()
        && lines.iter().all(|l| l.kind == LineKind::Gap)
    {
        s.sink.borrow_mut().push(s.err(
            "line",
            "a cboe-pitch feed needs at least one line with kind = \"realtime\" (a gap line \
             never begins a unit's session)",
        ));
    }
    if venue == VenueKind::CmeMdp3
        && !lines.is_empty()
        && lines.iter().all(|l| l.kind != LineKind::Incremental)
    {
        s.sink.borrow_mut().push(s.err(
            "line",
            "a cme-mdp3 feed needs at least one line with kind = \"incremental\"",
        ));
    }
    let recovery_entries = match s.uint("recovery_entries", 0, 1 << 32)? {
        Some(_) if venue != VenueKind::CmeMdp3 => {
            return Err(s.err("recovery_entries", "applies to cme-mdp3 feeds only"))
        }
        Some(n) => n as usize,
        None => crate::venue::cme_mdp3::recovery::DEFAULT_RECOVERY_ENTRIES,
    };
    let symbols = match s.table("symbols")? {
        None => Vec::new(),
        Some(syms) => parse_symbols(syms, venue)?,
    };
    let busy_poll = s.boolean("busy_poll")?.unwrap_or(false);
    let cpu = s.uint("cpu", 0, 4095)?.map(|c| c as usize);
    let fifo_priority = s.uint("fifo_priority", 1, 99)?.map(|p| p as i32);
    s.finish()?;
    Ok(FeedConfig {
        name: name.to_string(),
        venue,
        max_orders,
        recovery_entries,
        mode,
        liveness,
        stale_ms,
        source_max_age_ms,
        max_seq_jump,
        max_channel_jump,
        gap_hold_us,
        gap_hold_packets,
        rerequest,
        rerequest_timeout_ms,
        rerequest_attempts,
        max_hole_ms,
        snapshot,
        grp,
        spin,
        clock_offset,
        max_symbols,
        lines,
        symbols,
        busy_poll,
        fifo_priority,
        cpu,
    })
}

/// R5: `snapshot = { address = "ip:port", username, password, hold_mib,
/// max_mib }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotConfig {
    pub address: SocketAddr,
    /// SoupBinTCP fields: at most 6 and 10 ASCII characters.
    pub username: String,
    pub password: String,
    /// Most MiB of datagrams held while an attempt runs.
    pub hold_mib: u64,
    /// Most MiB of the snapshot's own messages.
    pub max_mib: u64,
}

/// R5: `snapshot.hold_mib`'s and `snapshot.max_mib`'s defaults.
pub const DEFAULT_SNAPSHOT_HOLD_MIB: u64 =
    (crate::feed::settings::DEFAULT_SNAPSHOT_HOLD_BYTES >> 20) as u64;
pub const DEFAULT_SNAPSHOT_MAX_MIB: u64 =
    (crate::feed::settings::DEFAULT_SNAPSHOT_MAX_BYTES >> 20) as u64;

/// MiB to bytes, saturating.
pub fn mib(n: u64) -> usize {
    usize::try_from(n.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
}

fn parse_snapshot(mut s: Section<'_>) -> Result<SnapshotConfig> {
    let text = s.required_str("address")?;
    let address = text
        .parse::<SocketAddr>()
        .map_err(|_| s.err("address", format!("\"{text}\" is not an ip:port address")))?;
    let username = s.required_str("username")?.to_string();
    let password = s.required_str("password")?.to_string();
    for (key, v, max) in [("username", &username, 6), ("password", &password, 10)] {
        if v.is_empty() || v.len() > max || !v.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(s.err(
                key,
                format!("1 to {max} printable ASCII characters without spaces (SoupBinTCP)"),
            ));
        }
    }
    let hold_mib = s
        .uint("hold_mib", 1, 1 << 20)?
        .unwrap_or(DEFAULT_SNAPSHOT_HOLD_MIB);
    let max_mib = s
        .uint("max_mib", 1, 1 << 20)?
        .unwrap_or(DEFAULT_SNAPSHOT_MAX_MIB);
    s.finish()?;
    Ok(SnapshotConfig {
        address,
        username,
        password,
        hold_mib,
        max_mib,
    })
}

/// R4c: `grp = { address = "ip:port", session_sub_id, username, password,
/// max_count = 100 }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpConfig {
    pub address: SocketAddr,
    pub login: Login,
    /// The most messages one Gap Request asks for (1 to 65535).
    pub max_count: u16,
}

/// recovery.md Settings: `grp.max_count`'s default.
pub const DEFAULT_GRP_MAX_COUNT: u16 = 100;

/// R5c: `spin = { session_sub_id, username, password, servers = { "<unit>"
/// = "ip:port", ... }, hold_mib, max_mib }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpinConfig {
    pub login: Login,
    /// The Spin Server of each unit named, by unit (1 to 255), ascending.
    pub servers: Vec<(u8, SocketAddr)>,
    /// Most MiB of datagrams held while a spin runs.
    pub hold_mib: u64,
    /// Most MiB of the spin's own messages.
    pub max_mib: u64,
}

/// The three credentials Cboe issues (recovery.md Settings: at most 4, 4
/// and 10 printable ASCII characters; a password may be empty).
fn parse_login(s: &mut Section<'_>) -> Result<Login> {
    let session_sub_id = s.required_str("session_sub_id")?;
    let username = s.required_str("username")?;
    let password = s.required_str("password")?;
    Login::new(session_sub_id, username, password).map_err(|e| {
        let key = match e {
            CredentialError::Empty { field }
            | CredentialError::TooLong { field, .. }
            | CredentialError::NotPrintable { field } => field,
        };
        s.err(key, e.to_string())
    })
}

fn parse_grp(mut s: Section<'_>) -> Result<GrpConfig> {
    let text = s.required_str("address")?;
    let address = text
        .parse::<SocketAddr>()
        .ok()
        .filter(|a| a.port() != 0)
        .ok_or_else(|| s.err("address", format!("\"{text}\" is not an ip:port address")))?;
    let login = parse_login(&mut s)?;
    let max_count = s
        .uint("max_count", 1, u16::MAX as u64)?
        .map_or(DEFAULT_GRP_MAX_COUNT, |n| n as u16);
    s.finish()?;
    Ok(GrpConfig {
        address,
        login,
        max_count,
    })
}

fn parse_spin(mut s: Section<'_>) -> Result<SpinConfig> {
    let login = parse_login(&mut s)?;
    let mut servers = Vec::new();
    match s.get("servers") {
        None => return Err(s.err("servers", "missing (the Spin Server of each unit)")),
        Some(Value::Table(t)) => {
            for (unit, v) in t {
                let key = format!("servers.{unit}");
                let u = match unit.parse::<u8>() {
                    Ok(0) => {
                        return Err(s.err(
                            &key,
                            "unit 0 has no Spin Server (units are 1 to 255; 0 is only the \
                             TCP connections' own)",
                        ))
                    }
                    Ok(u) => u,
                    Err(_) => {
                        return Err(s.err(&key, format!("\"{unit}\" is not a unit (1 to 255)")))
                    }
                };
                let addr = v
                    .as_str()
                    .and_then(|t| t.parse::<SocketAddr>().ok())
                    .filter(|a| a.port() != 0)
                    .ok_or_else(|| s.err(&key, "expected a string \"ip:port\""))?;
                servers.push((u, addr));
            }
        }
        Some(v) => {
            return Err(s.err(
                "servers",
                format!(
                    "expected a table {{ \"<unit>\" = \"ip:port\" }}, found {}",
                    type_name(v)
                ),
            ))
        }
    }
    servers.sort_unstable_by_key(|&(u, _)| u);
    let hold_mib = s
        .uint("hold_mib", 1, 1 << 20)?
        .unwrap_or(DEFAULT_SNAPSHOT_HOLD_MIB);
    let max_mib = s
        .uint("max_mib", 1, 1 << 20)?
        .unwrap_or(DEFAULT_SNAPSHOT_MAX_MIB);
    s.finish()?;
    Ok(SpinConfig {
        login,
        servers,
        hold_mib,
        max_mib,
    })
}

/// `cme_channel = { file = "config.xml", id = 310, interface = "eth1" }`:
/// every multicast line of one channel of CME's channel file.
fn parse_cme_channel(mut s: Section<'_>) -> Result<Vec<LineConfig>> {
    let file = s.required_str("file")?;
    let id = s.required_uint(
        "id",
        1,
        u32::MAX as u64,
        "missing (the channel id, e.g. 310)",
    )? as u32;
    let interface = match s.str("interface")? {
        None => None,
        Some(text) => Some(parse_interface(text).map_err(|p| s.err("interface", p))?),
    };
    let rcvbuf = s.uint("rcvbuf", 4096, i32::MAX as u64)?.map(|n| n as usize);
    let xml =
        read_config_file(Path::new(file)).map_err(|e| s.err("file", format!("{file}: {e}")))?;
    let lines = crate::venue::cme_mdp3::channel_file::channel_lines(&xml, id)
        .map_err(|e| s.err("file", format!("{file}: {e}")))?;
    s.finish()?;
    Ok(lines
        .into_iter()
        .map(|l| LineConfig {
            name: l.name,
            group: l.group,
            port: l.port,
            interface: interface.clone(),
            source: None,
            rcvbuf,
            kind: l.kind,
        })
        .collect())
}

/// R4: `rerequest = ["ip:port", ...]`, on `tickgate` and `nasdaq-itch`
/// feeds only (IEX has no MoldUDP64 re-request service).
fn parse_rerequest(s: &mut Section<'_>, venue: VenueKind) -> Result<Vec<SocketAddr>> {
    let Some(v) = s.get("rerequest") else {
        return Ok(Vec::new());
    };
    if venue == VenueKind::IexTops {
        s.sink.borrow_mut().push(s.err(
            "rerequest",
            "applies to tickgate and nasdaq-itch feeds only (IEX-TP has no re-request service)",
        ));
        return Ok(Vec::new());
    }
    if venue == VenueKind::CboePitch {
        s.sink.borrow_mut().push(s.err(
            "rerequest",
            "does not apply to cboe-pitch feeds (Cboe has no MoldUDP64 re-request service: \
             use grp, its Gap Request Proxy)",
        ));
        return Ok(Vec::new());
    }
    if venue == VenueKind::CmeMdp3 {
        s.sink.borrow_mut().push(s.err(
            "rerequest",
            "applies to tickgate and nasdaq-itch feeds only (cme-mdp3 recovers from its \
             snapshot lines: add lines with kind = \"snapshot\")",
        ));
        return Ok(Vec::new());
    }
    let Value::Array(items) = v else {
        s.sink.borrow_mut().push(s.err(
            "rerequest",
            format!(
                "expected an array of \"ip:port\" strings, found {}",
                type_name(v)
            ),
        ));
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let key = format!("rerequest[{i}]");
        match item.as_str().map(|t| (t, t.parse::<SocketAddr>())) {
            Some((_, Ok(addr))) if addr.port() != 0 => out.push(addr),
            Some((t, _)) => s.sink.borrow_mut().push(s.err(
                &key,
                format!("\"{t}\" is not an ip:port address with a port"),
            )),
            None => s.sink.borrow_mut().push(s.err(
                &key,
                format!("expected a string \"ip:port\", found {}", type_name(item)),
            )),
        }
    }
    if out.len() > MAX_REREQUEST_SERVERS {
        s.sink.borrow_mut().push(s.err(
            "rerequest",
            format!("{} servers; at most {MAX_REREQUEST_SERVERS}", out.len()),
        ));
    }
    Ok(out)
}

fn parse_line(mut s: Section<'_>) -> Result<LineConfig> {
    // Each problem is recorded and the walk goes on (a placeholder stands
    // in; the recorded problem refuses the config), so that the line's
    // other keys are checked too.
    let sink = s.sink;
    let name = keep(sink, s.required_str("name")).unwrap_or_default();
    if let Err(p) = check_name(name) {
        sink.borrow_mut().push(s.err("name", p));
    }
    let group = keep(sink, s.required_str("group"))
        .and_then(|text| keep(sink, parse_ipv4(text).map_err(|p| s.err("group", p))))
        .unwrap_or(Ipv4Addr::new(239, 0, 0, 0));
    if !group.is_multicast() {
        sink.borrow_mut().push(s.err(
            "group",
            format!("{group} is not a multicast address (224.0.0.0/4)"),
        ));
    }
    let port = keep(
        sink,
        s.required_uint(
            "port",
            1,
            u16::MAX as u64,
            "missing (the UDP port of the group)",
        ),
    )
    .unwrap_or(1) as u16;
    let interface = match s.str("interface")? {
        None => None,
        Some(text) => keep(
            sink,
            parse_interface(text).map_err(|p| s.err("interface", p)),
        ),
    };
    let source = match s.str("source")? {
        None => None,
        Some(text) => {
            let a = keep(sink, parse_ipv4(text).map_err(|p| s.err("source", p)));
            if let Some(a) =
                a.filter(|a| a.is_multicast() || a.is_unspecified() || a.is_broadcast())
            {
                sink.borrow_mut()
                    .push(s.err("source", format!("{a} is not a unicast sender address")));
            }
            a
        }
    };
    let rcvbuf = s.uint("rcvbuf", 4096, i32::MAX as u64)?.map(|n| n as usize);
    let kind = match s.str("kind")? {
        None => LineKind::Incremental,
        Some(text) => keep(
            sink,
            LineKind::parse(text).ok_or_else(|| {
                s.err(
                    "kind",
                    format!(
                        "\"{text}\" is not one of: incremental, snapshot, definition \
                         (cme-mdp3), realtime, gap (cboe-pitch)"
                    ),
                )
            }),
        )
        .unwrap_or_default(),
    };
    s.finish()?;
    Ok(LineConfig {
        name: name.to_string(),
        group,
        port,
        interface,
        source,
        rcvbuf,
        kind,
    })
}

/// The receiver joins IPv4 groups only, so addresses are IPv4; an IPv6
/// address gets its own message rather than "not an IP address".
fn parse_ipv4(text: &str) -> std::result::Result<Ipv4Addr, String> {
    match text.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => Ok(a),
        Ok(IpAddr::V6(a)) => Err(format!("{a} is IPv6; only IPv4 is supported")),
        Err(_) => Err(format!("\"{text}\" is not an IPv4 address")),
    }
}

fn parse_interface(text: &str) -> std::result::Result<InterfaceSpec, String> {
    if text.contains(':') {
        return Err(parse_ipv4(text).err().unwrap_or_default());
    }
    if let Ok(a) = text.parse::<Ipv4Addr>() {
        if a.is_multicast() || a.is_unspecified() || a.is_broadcast() {
            return Err(format!("{a} is not the address of a local interface"));
        }
        return Ok(InterfaceSpec::Addr(a));
    }
    // IFNAMSIZ is 16 including the NUL.
    let valid = !text.is_empty()
        && text.len() <= 15
        && text
            .bytes()
            .all(|c| c.is_ascii_graphic() && c != b'/' && c != b':');
    if !valid {
        return Err(format!(
            "\"{text}\" is neither an IPv4 address nor an interface name"
        ));
    }
    Ok(InterfaceSpec::Name(text.to_string()))
}

fn parse_symbols(syms: Section<'_>, venue: VenueKind) -> Result<Vec<SymbolConfig>> {
    let mut out = Vec::new();
    let max = venue.max_symbol_len();
    for (name, mut s) in syms.into_tables()? {
        // A longer name than the venue can send would never match.
        let Some(symbol) = Symbol::parse(&name).filter(|_| name.len() <= max) else {
            s.sink.borrow_mut().push(ConfigError::invalid(
                s.path.clone(),
                format!(
                    "\"{name}\" is not a symbol of a {venue} feed (1 to {max} printable ASCII characters)"
                ),
            ));
            continue;
        };
        let stale_ms = s.uint("stale_ms", 1, MAX_THRESHOLD_MS)?;
        let source_max_age_ms = s.uint("source_max_age_ms", 1, MAX_THRESHOLD_MS)?;
        s.finish()?;
        out.push(SymbolConfig {
            symbol,
            stale_ms,
            source_max_age_ms,
        });
    }
    out.sort_by_key(|s| s.symbol);
    Ok(out)
}

/// A Unix socket's path (`key`): not empty, short enough for `sun_path`.
fn parse_socket_path(s: &mut Section<'_>, key: &'static str) -> Result<Option<PathBuf>> {
    let Some(p) = s.str(key)? else {
        return Ok(None);
    };
    if p.is_empty() {
        return Err(s.err(key, "empty path"));
    }
    if p.len() > MAX_SOCKET_PATH {
        return Err(s.err(
            key,
            format!(
                "path is {} bytes; a Unix socket path holds at most {MAX_SOCKET_PATH}",
                p.len()
            ),
        ));
    }
    Ok(Some(PathBuf::from(p)))
}

/// A Unix socket's file mode (`key`): an octal string ("0660") or TOML's
/// octal literal (0o660), letting the owner read and write.
fn parse_socket_mode(s: &mut Section<'_>, key: &'static str) -> Result<Option<u32>> {
    let mode = match s.get(key) {
        None => return Ok(None),
        Some(Value::String(text)) => {
            let digits = text.strip_prefix("0o").unwrap_or(text);
            match u32::from_str_radix(digits, 8) {
                Ok(m) if m <= 0o777 && !digits.is_empty() => m,
                _ => {
                    return Err(s.err(
                        key,
                        format!("\"{text}\" is not an octal file mode such as \"0660\""),
                    ))
                }
            }
        }
        // TOML's own octal literal (0o660).
        Some(Value::Integer(m)) if (0..=0o777).contains(m) => *m as u32,
        Some(other) => {
            return Err(s.err(
                key,
                format!("{} is not an octal file mode such as \"0660\"", show(other)),
            ))
        }
    };
    if mode & 0o600 != 0o600 {
        return Err(s.err(
            key,
            format!("{mode:04o} does not let the owner read and write the socket"),
        ));
    }
    Ok(Some(mode))
}

fn parse_gate(mut s: Section<'_>) -> Result<GateConfig> {
    let mut g = GateConfig::default();
    if let Some(p) = parse_socket_path(&mut s, "socket")? {
        g.socket = p;
    }
    if let Some(m) = parse_socket_mode(&mut s, "socket_mode")? {
        g.socket_mode = m;
    }
    g.server_mode = match s.str("server_mode")? {
        None | Some("blocking") => ServerMode::Blocking,
        Some("epoll") => ServerMode::Epoll,
        Some("busy_poll") => ServerMode::BusyPoll,
        Some(other) => {
            return Err(s.err(
                "server_mode",
                format!("\"{other}\" is not one of: blocking, epoll, busy_poll"),
            ))
        }
    };
    g.cpu = s.uint("cpu", 0, 4095)?.map(|c| c as usize);
    if let Some(n) = s.uint("max_connections", 1, 1_000_000)? {
        g.max_connections = n as usize;
    }
    g.shm = match s.get("shm") {
        None => Some(default_shm(&g.socket)),
        Some(Value::Boolean(false)) => None,
        Some(Value::Boolean(true)) => Some(default_shm(&g.socket)),
        Some(Value::String(p)) if !p.is_empty() => Some(PathBuf::from(p)),
        Some(other) => return Err(s.err("shm", format!("{} is not a path or false", show(other)))),
    };
    g.max_connections_per_uid = default_per_uid(g.max_connections);
    if let Some(n) = s.uint("max_connections_per_uid", 1, g.max_connections as u64)? {
        g.max_connections_per_uid = n as usize;
    }
    // gate.md "One symbol on several feeds".
    use crate::feed::across::{Across, GateRules, DEFAULT_CROSSED_MS};
    let across = match s.str("across")? {
        None => Across::All,
        Some(a) => Across::parse(a)
            .ok_or_else(|| s.err("across", format!("\"{a}\" is not one of: all, any")))?,
    };
    let crossed_ms = s
        .uint("crossed_ms", 0, 3_600_000)?
        .unwrap_or(DEFAULT_CROSSED_MS);
    g.rules = GateRules::new(across, crossed_ms);
    s.finish()?;
    Ok(g)
}

fn parse_metrics(mut s: Section<'_>) -> Result<MetricsConfig> {
    let enabled = s.boolean("enabled")?.unwrap_or(true);
    let allow_remote = s.boolean("allow_remote")?.unwrap_or(false);
    let limits = parse_limits(
        &mut s,
        crate::http_limits::HttpLimits::metrics_default(),
        false,
    );
    let listen = match s.str("listen")? {
        None => DEFAULT_METRICS_LISTEN.parse().expect("valid default"),
        Some(text) => text.parse::<SocketAddr>().map_err(|_| {
            s.err(
                "listen",
                format!("\"{text}\" is not an address:port such as \"127.0.0.1:9477\""),
            )
        })?,
    };
    if enabled {
        if let Err(p) = check_local(listen, allow_remote) {
            s.sink.borrow_mut().push(s.err("listen", p));
        }
    }
    s.finish()?;
    Ok(MetricsConfig {
        listen: enabled.then_some(listen),
        allow_remote,
        limits,
    })
}

/// An HTTP listener's limits (`crate::http_limits`) from its table:
/// `header_timeout`, `body_timeout`, `idle_timeout` (durations such as
/// "10s"), `max_connections`, and with `rate`, `rate_per_client`
/// (requests a second per client token, 0 = off) and `rate_burst`.
fn parse_limits(
    s: &mut Section<'_>,
    defaults: crate::http_limits::HttpLimits,
    rate: bool,
) -> crate::http_limits::HttpLimits {
    let mut l = defaults;
    for (key, slot) in [
        ("header_timeout", &mut l.header_timeout),
        ("body_timeout", &mut l.body_timeout),
        ("idle_timeout", &mut l.idle_timeout),
    ] {
        let value = match s.get(key) {
            None => continue,
            Some(Value::Integer(n)) if *n > 0 => Ok(std::time::Duration::from_secs(*n as u64)),
            Some(Value::String(t)) => crate::fills::config::parse_duration(t).and_then(|d| {
                if d.is_zero() {
                    Err("must be more than 0".into())
                } else {
                    Ok(d)
                }
            }),
            Some(v) => Err(format!(
                "expected a duration such as \"10s\", got {}",
                show(v)
            )),
        };
        match value {
            Ok(d) => *slot = d,
            Err(p) => s.sink.borrow_mut().push(s.err(key, p)),
        }
    }
    if let Ok(Some(n)) = s.uint("max_connections", 1, 1_000_000) {
        l.max_connections = n as usize;
        l.max_connections_per_client = crate::http_limits::default_per_client(l.max_connections);
    }
    if rate {
        if let Ok(Some(n)) = s.uint("max_connections_per_client", 1, l.max_connections as u64) {
            l.max_connections_per_client = n as usize;
        }
        if let Ok(Some(n)) = s.uint("rate_per_client", 0, 1_000_000) {
            l.rate_per_sec = n as u32;
        }
        if let Ok(Some(n)) = s.uint("rate_burst", 1, 1_000_000) {
            l.rate_burst = n as u32;
        }
    }
    l
}

/// The keys of `[fills.http]` read here, not by serde: the limits
/// (`parse_limits`) and the Unix socket (`parse_socket_path`, `parse_socket_mode`).
const FILLS_HTTP_KEYS_READ_HERE: [&str; 9] = [
    "header_timeout",
    "body_timeout",
    "idle_timeout",
    "max_connections",
    "max_connections_per_client",
    "socket",
    "socket_mode",
    "rate_per_client",
    "rate_burst",
];

/// HTTP endpoints (metrics, the fills API) listen on loopback unless the
/// operator says otherwise: metrics have no authentication at all.
fn check_local(addr: SocketAddr, allow_remote: bool) -> std::result::Result<(), String> {
    if addr.ip().is_loopback() || allow_remote {
        Ok(())
    } else {
        Err(format!(
            "{addr} is not a loopback address; set allow_remote = true in this table to listen there"
        ))
    }
}

fn parse_log(mut s: Section<'_>) -> Result<LogConfig> {
    let format = match s.str("format")? {
        None | Some("human") => LogFormat::Human,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(s.err("format", format!("\"{other}\" is not one of: human, json")))
        }
    };
    let level = match s.str("level")? {
        None => LogConfig::default().level,
        Some(level) => {
            if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
                return Err(s.err(
                    "level",
                    format!("\"{level}\" is not a log filter (e.g. \"info\" or \"tickgate=debug,warn\"): {e}"),
                ));
            }
            level.to_string()
        }
    };
    s.finish()?;
    Ok(LogConfig { format, level })
}

fn parse_fills(mut s: Section<'_>) -> Result<Option<FillsConfig>> {
    let enabled = s.boolean("enabled")?.unwrap_or(true);
    // The rest of the section belongs to the fills lane's own schema
    // (serde), but for the keys read here.
    let mut rest = s.table.clone();
    rest.remove("enabled");
    let mut allow_remote = false;
    let mut limits = crate::http_limits::HttpLimits::default();
    let (mut unix_socket, mut unix_socket_mode) = (None, None);
    if let Some(Value::Table(http)) = rest.get_mut("http") {
        let copy = http.clone();
        let mut hs = Section {
            path: s.key("http"),
            pattern: "fills.http".to_string(),
            table: &copy,
            asked: Vec::new(),
            sink: s.sink,
        };
        limits = parse_limits(&mut hs, limits, true);
        // The API on a Unix socket as well (docs/operations.md).
        match parse_socket_path(&mut hs, "socket") {
            Ok(p) => unix_socket = p,
            Err(e) => s.sink.borrow_mut().push(e),
        }
        match parse_socket_mode(&mut hs, "socket_mode") {
            Ok(m) => unix_socket_mode = m,
            Err(e) => s.sink.borrow_mut().push(e),
        }
        for k in FILLS_HTTP_KEYS_READ_HERE {
            http.remove(k);
        }
        match http.remove("allow_remote") {
            None => {}
            Some(Value::Boolean(b)) => allow_remote = b,
            Some(v) => s.sink.borrow_mut().push(ConfigError::invalid(
                s.key("http.allow_remote"),
                format!("expected true or false, found {}", type_name(&v)),
            )),
        }
    }
    let mut fills: FillsConfig = match deserialize_all(rest, &s.path) {
        Ok(f) => f,
        Err(all) => {
            s.sink.borrow_mut().extend(all);
            return Ok(None);
        }
    };
    match fills.http.listen.parse::<SocketAddr>() {
        Err(_) => s.sink.borrow_mut().push(s.err(
            "http.listen",
            format!(
                "\"{}\" is not an address:port such as \"127.0.0.1:8088\"",
                fills.http.listen
            ),
        )),
        Ok(addr) => {
            if let Err(p) = check_local(addr, allow_remote) {
                s.sink.borrow_mut().push(s.err("http.listen", p));
            }
        }
    }
    fills.http.limits = limits;
    fills.http.socket = unix_socket;
    if let Some(m) = unix_socket_mode {
        fills.http.socket_mode = m;
    }
    if let Err(e) = fills.validate() {
        // The lane's own checks say "fills.max_batch must be >= 1": the
        // key path is their first word.
        let text = format!("{e:#}");
        let (key, problem) = match text.split_once(' ') {
            Some((k, p)) if k.starts_with("fills.") || k.starts_with("fills:") => {
                (k.trim_end_matches(':').to_string(), p.to_string())
            }
            _ => (s.path.clone(), text.clone()),
        };
        s.sink.borrow_mut().push(ConfigError::invalid(key, problem));
    }
    Ok(enabled.then_some(fills))
}

/// Deserializes `table` (the section at `prefix`) with serde, reporting
/// every problem with its key path: after a problem, the offending key is
/// taken out and the rest tried again.
fn deserialize_all<T: serde::de::DeserializeOwned>(
    mut table: Table,
    prefix: &str,
) -> std::result::Result<T, Vec<ConfigError>> {
    use serde_path_to_error::Segment;
    let mut errors = Vec::new();
    // Each round takes one key out: a bounded number of rounds.
    for _ in 0..256 {
        let e = match serde_path_to_error::deserialize::<_, T>(Value::Table(table.clone())) {
            Ok(v) if errors.is_empty() => return Ok(v),
            Ok(_) => return Err(errors),
            Err(e) => e,
        };
        let mut key = prefix.to_string();
        let mut segments = Vec::new();
        for seg in e.path().iter() {
            match seg {
                Segment::Map { key: k } => {
                    key.push('.');
                    key.push_str(k);
                    segments.push(Ok(k.clone()));
                }
                Segment::Seq { index } => {
                    key.push_str(&format!("[{index}]"));
                    segments.push(Err(*index));
                }
                Segment::Enum { .. } | Segment::Unknown => {}
            }
        }
        let (extra, problem) = serde_problem(e.inner().message());
        if let Some(extra) = extra {
            key.push('.');
            key.push_str(&extra);
        }
        errors.push(ConfigError::invalid(key, problem));
        // An unknown key is the key itself; otherwise the path ends at
        // the value that did not fit.
        if let Some(extra) = serde_unknown_field(e.inner().message()) {
            segments.push(Ok(extra));
        }
        if !remove_at(&mut table, &segments) {
            break;
        }
    }
    Err(errors)
}

/// Takes the value at `path` out of `table`; false when that cannot be
/// done without renumbering an array (then the caller stops).
fn remove_at(table: &mut Table, path: &[std::result::Result<String, usize>]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut cur = table;
    for seg in parents {
        let next = match seg {
            Ok(k) => cur.get_mut(k),
            Err(_) => return false,
        };
        cur = match next {
            Some(Value::Table(t)) => t,
            Some(Value::Array(items)) => {
                // Only a path through an array of one table continues.
                match items.as_mut_slice() {
                    [Value::Table(t)] => t,
                    _ => return false,
                }
            }
            _ => return false,
        };
    }
    match last {
        Ok(k) => cur.remove(k).is_some(),
        Err(_) => false,
    }
}

/// serde's messages in this file's words: `invalid type: string "many",
/// expected usize` is `expected a whole number, got "many"`. Returns the
/// key a message names (a missing field) and the problem.
fn serde_problem(message: &str) -> (Option<String>, String) {
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("missing field `") {
        return (
            Some(rest.trim_end_matches('`').to_string()),
            "missing".into(),
        );
    }
    if let Some(field) = serde_unknown_field(message) {
        let expected = message
            .split_once(", expected one of ")
            .map(|(_, e)| e.replace('`', ""))
            .or_else(|| {
                message
                    .split_once(", expected ")
                    .map(|(_, e)| e.replace('`', ""))
            });
        let _ = field;
        return (
            None,
            match expected {
                Some(e) => format!("unknown key (expected one of: {e})"),
                None => "unknown key".into(),
            },
        );
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            if let Some((got, expected)) = rest.split_once(", expected ") {
                return (
                    None,
                    format!(
                        "expected {}, got {}",
                        serde_expected(expected),
                        serde_got(got)
                    ),
                );
            }
        }
    }
    if message.starts_with("data did not match any variant") {
        return (None, "expected a duration such as \"5s\" or \"72h\"".into());
    }
    (None, message.to_string())
}

fn serde_unknown_field(message: &str) -> Option<String> {
    let rest = message.trim().strip_prefix("unknown field `")?;
    Some(rest.split('`').next().unwrap_or_default().to_string())
}

fn serde_expected(expected: &str) -> String {
    match expected.trim() {
        "usize" | "u8" | "u16" | "u32" | "u64" | "u128" | "isize" | "i8" | "i16" | "i32"
        | "i64" | "i128" => "a whole number".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "an array".into(),
        "f32" | "f64" => "a number".into(),
        e if e.starts_with("struct ") || e.starts_with("a map") => "a table".into(),
        e => e.to_string(),
    }
}

fn serde_got(got: &str) -> String {
    let got = got.trim();
    for prefix in [
        "string ",
        "integer ",
        "floating point ",
        "boolean ",
        "unsigned integer ",
    ] {
        if let Some(v) = got.strip_prefix(prefix) {
            return v.trim_matches('`').to_string();
        }
    }
    match got {
        "sequence" => "an array".into(),
        "map" => "a table".into(),
        g => g.to_string(),
    }
}

/// Sorts several problems into the order of the keys in `text`.
fn in_file_order(e: ConfigError, text: &str) -> ConfigError {
    let ConfigError::Several(mut all) = e else {
        return e;
    };
    let mut at = HashMap::new();
    if let Ok(doc) = toml::de::DeTable::parse(text) {
        key_positions("", doc.get_ref(), &mut at);
    }
    let position = |e: &ConfigError| -> usize {
        let mut key = e.key().unwrap_or_default();
        loop {
            if let Some(p) = at.get(key) {
                return *p;
            }
            match key.rfind(['.', '[']) {
                Some(i) => key = &key[..i],
                None => return usize::MAX,
            }
        }
    };
    all.sort_by_key(position);
    ConfigError::Several(all)
}

fn key_positions(prefix: &str, table: &toml::de::DeTable<'_>, at: &mut HashMap<String, usize>) {
    for (k, v) in table.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        at.insert(path.clone(), k.span().start);
        value_positions(&path, v, at);
    }
}

fn value_positions(
    path: &str,
    v: &toml::Spanned<toml::de::DeValue<'_>>,
    at: &mut HashMap<String, usize>,
) {
    match v.get_ref() {
        toml::de::DeValue::Table(t) => key_positions(path, t, at),
        toml::de::DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let p = format!("{path}[{i}]");
                at.insert(p.clone(), item.span().start);
                value_positions(&p, item, at);
            }
        }
        _ => {}
    }
}

/// One local user may hold three quarters of the gate's connections: the
/// rest stay for the others.
fn default_per_uid(max_connections: usize) -> usize {
    (max_connections - max_connections / 4).max(1)
}

/// Feed and line names appear in metric labels and log lines.
fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > 32 {
        return Err(format!("\"{name}\" must be 1 to 32 characters"));
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
    {
        return Err(format!(
            "\"{name}\" may contain only letters, digits, '_', '-' and '.'"
        ));
    }
    Ok(())
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(_) => "an array".to_string(),
        Value::Table(_) => "a table".to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date-time",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// The keys of every table the walk reads by hand, by table pattern (key
/// path without array indices; `*` for a table whose keys are data, such
/// as symbols). The one list: an unknown key is refused against it
/// (`check_keys`), its message quotes it, `Section::get` asserts it reads
/// nothing else, and `config/tickgate.toml` holds each of its keys (a
/// test). A new key or table is one entry here, and one line in the
/// example config. The fills lane's tables are serde's (`keys_of`).
const WALKED_KEYS: &[(&str, &[&str])] = &[
    ("", &["feed", "gate", "metrics", "log", "fills"]),
    (
        "feed",
        &[
            "name",
            "venue",
            "mode",
            "max_orders",
            "liveness",
            "stale_ms",
            "source_max_age_ms",
            "max_seq_jump",
            "max_channel_jump",
            "gap_hold_us",
            "gap_hold_packets",
            "rerequest",
            "rerequest_timeout_ms",
            "rerequest_attempts",
            "max_hole_ms",
            "snapshot",
            "grp",
            "spin",
            "clock_offset",
            "max_symbols",
            "line",
            "cme_channel",
            "recovery_entries",
            "symbols",
            "busy_poll",
            "cpu",
            "fifo_priority",
        ],
    ),
    (
        "feed.line",
        &[
            "name",
            "group",
            "port",
            "interface",
            "source",
            "rcvbuf",
            "kind",
        ],
    ),
    (
        "feed.snapshot",
        &["address", "username", "password", "hold_mib", "max_mib"],
    ),
    (
        "feed.grp",
        &[
            "address",
            "session_sub_id",
            "username",
            "password",
            "max_count",
        ],
    ),
    (
        "feed.spin",
        &[
            "session_sub_id",
            "username",
            "password",
            "servers",
            "hold_mib",
            "max_mib",
        ],
    ),
    // Unit numbers are data: `servers = { "1" = "ip:port" }`.
    ("feed.spin.servers", &["*"]),
    ("feed.cme_channel", &["file", "id", "interface", "rcvbuf"]),
    ("feed.symbols", &["*"]),
    ("feed.symbols.*", &["stale_ms", "source_max_age_ms"]),
    (
        "gate",
        &[
            "socket",
            "socket_mode",
            "server_mode",
            "cpu",
            "max_connections",
            "shm",
            "max_connections_per_uid",
            "across",
            "crossed_ms",
        ],
    ),
    (
        "metrics",
        &[
            "enabled",
            "allow_remote",
            "listen",
            "header_timeout",
            "body_timeout",
            "idle_timeout",
            "max_connections",
        ],
    ),
    ("log", &["format", "level"]),
];

/// The keys of the table at `pattern` (see [`WALKED_KEYS`]): the walk's
/// own, or for the fills lane the fields of its serde structs (the very
/// list serde parses with) and the keys read here beside them. `None` for
/// a value that is no table of the config.
pub fn keys_of(pattern: &str) -> Option<Vec<&'static str>> {
    use crate::fills::config as f;
    if let Some((_, keys)) = WALKED_KEYS.iter().find(|(p, _)| *p == pattern) {
        return Some(keys.to_vec());
    }
    let (fields, extra): (&[&str], &[&str]) = match pattern {
        "fills" => (serde_fields::<f::FillsConfig>(), &["enabled"]),
        "fills.http" => (serde_fields::<f::HttpConfig>(), &FILLS_HTTP_KEYS_READ_HERE),
        "fills.http.clients" => (serde_fields::<f::ClientConfig>(), &[]),
        "fills.nats" => (serde_fields::<f::NatsConfig>(), &[]),
        "fills.kafka" => (serde_fields::<f::KafkaConfig>(), &[]),
        "fills.cache" => (serde_fields::<f::CacheConfig>(), &[]),
        "fills.retention" => (serde_fields::<f::RetentionConfig>(), &[]),
        _ => return None,
    };
    let beside: &[&str] = if pattern == "fills.http" {
        &["allow_remote"]
    } else {
        &[]
    };
    Some(extra.iter().chain(beside).chain(fields).copied().collect())
}

/// Every table pattern of the config and its keys.
pub fn all_keys() -> Vec<(&'static str, Vec<&'static str>)> {
    WALKED_KEYS
        .iter()
        .map(|(p, _)| *p)
        .chain([
            "fills",
            "fills.http",
            "fills.http.clients",
            "fills.nats",
            "fills.kafka",
            "fills.cache",
            "fills.retention",
        ])
        .map(|p| (p, keys_of(p).expect("every pattern listed has keys")))
        .collect()
}

/// The field names a serde-derived struct takes, as its derived
/// `Deserialize` hands them to `deserialize_struct` (no crate here
/// exposes them, and this is the list serde refuses unknown keys by).
fn serde_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Deserializer, Visitor};

    #[derive(Debug)]
    struct Fields(&'static [&'static str]);
    impl fmt::Display for Fields {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("field names")
        }
    }
    impl std::error::Error for Fields {}
    impl serde::de::Error for Fields {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Fields(&[])
        }
    }
    struct Capture;
    impl<'de> Deserializer<'de> for Capture {
        type Error = Fields;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> std::result::Result<V::Value, Fields> {
            Err(Fields(&[]))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> std::result::Result<V::Value, Fields> {
            Err(Fields(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    match T::deserialize(Capture) {
        Err(Fields(f)) => f,
        Ok(_) => &[],
    }
}

/// Refuses (records) every key of `table` (at key path `path`, table
/// pattern `pattern`) and of the tables in it that [`keys_of`] does not
/// list, and takes it out, so that no parser meets it: every unknown key
/// of the file is reported, whatever else is wrong with its table.
fn check_keys(table: &mut Table, path: &str, pattern: &str, sink: &Sink) {
    let Some(keys) = keys_of(pattern) else {
        return;
    };
    let join = |base: &str, k: &str| {
        if base.is_empty() {
            k.to_string()
        } else {
            format!("{base}.{k}")
        }
    };
    let data = keys == ["*"];
    let mut unknown = Vec::new();
    for (k, v) in table.iter_mut() {
        if !data && !keys.contains(&k.as_str()) {
            unknown.push(k.clone());
            continue;
        }
        let sub = join(pattern, if data { "*" } else { k });
        match v {
            Value::Table(t) => check_keys(t, &join(path, k), &sub, sink),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Table(t) = item {
                        check_keys(t, &format!("{}[{i}]", join(path, k)), &sub, sink);
                    }
                }
            }
            _ => {}
        }
    }
    for k in unknown {
        table.remove(&k);
        sink.borrow_mut().push(ConfigError::invalid(
            join(path, &k),
            format!("unknown key (expected one of: {})", keys.join(", ")),
        ));
    }
}

/// One table of the file being read: remembers its key path and which keys
/// were asked for, so that `finish` can refuse the ones nobody asked for (a
/// misspelt key must not silently fall back to a default). A key of the
/// wrong type is recorded in the sink and read as absent, so the walk goes
/// on and reports the next problem too.
struct Section<'a> {
    path: String,
    /// The table's pattern in [`WALKED_KEYS`].
    pattern: String,
    table: &'a Table,
    asked: Vec<&'static str>,
    sink: &'a Sink,
}

impl<'a> Section<'a> {
    fn root(table: &'a Table, sink: &'a Sink) -> Section<'a> {
        Section {
            path: String::new(),
            pattern: String::new(),
            table,
            asked: Vec::new(),
            sink,
        }
    }

    fn child(&self, path: String, key: &str, table: &'a Table) -> Section<'a> {
        Section {
            path,
            pattern: if self.pattern.is_empty() {
                key.to_string()
            } else {
                format!("{}.{key}", self.pattern)
            },
            table,
            asked: Vec::new(),
            sink: self.sink,
        }
    }

    fn key(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn err(&self, key: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::invalid(self.key(key), problem)
    }

    /// Records a problem and reads the key as absent.
    fn report<T>(&self, e: ConfigError) -> Result<Option<T>> {
        self.sink.borrow_mut().push(e);
        Ok(None)
    }

    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        debug_assert!(
            keys_of(&self.pattern).is_some_and(|k| k.contains(&key)),
            "{key} of [{}] is read but not in WALKED_KEYS",
            self.pattern
        );
        self.asked.push(key);
        self.table.get(key)
    }

    fn str(&mut self, key: &'static str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => {
                self.report(self.err(key, format!("expected a string, found {}", type_name(v))))
            }
        }
    }

    /// A key without which the table means nothing: its problem ends the
    /// table's walk (returned, not recorded).
    fn required_str(&mut self, key: &'static str) -> Result<&'a str> {
        match self.get(key) {
            None => Err(self.err(key, "missing")),
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(v) => Err(self.err(key, format!("expected a string, found {}", type_name(v)))),
        }
    }

    fn boolean(&mut self, key: &'static str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => self.report(self.err(
                key,
                format!("expected true or false, found {}", type_name(v)),
            )),
        }
    }

    fn uint_problem(&self, key: &str, v: &Value, min: u64, max: u64) -> Option<ConfigError> {
        match v {
            Value::Integer(i) if *i < 0 || (*i as u64) < min || (*i as u64) > max => {
                Some(self.err(key, format!("{i} is out of range {min}..={max}")))
            }
            Value::Integer(_) => None,
            v => Some(self.err(
                key,
                format!("expected a whole number, found {}", type_name(v)),
            )),
        }
    }

    fn uint(&mut self, key: &'static str, min: u64, max: u64) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match self.uint_problem(key, v, min, max) {
                Some(e) => self.report(e),
                None => Ok(v.as_integer().map(|i| i as u64)),
            },
        }
    }

    /// Like `required_str`, for a whole number.
    fn required_uint(
        &mut self,
        key: &'static str,
        min: u64,
        max: u64,
        missing: &str,
    ) -> Result<u64> {
        match self.get(key) {
            None => Err(self.err(key, missing)),
            Some(v) => match self.uint_problem(key, v, min, max) {
                Some(e) => Err(e),
                None => Ok(v.as_integer().unwrap_or_default() as u64),
            },
        }
    }

    fn table(&mut self, key: &'static str) -> Result<Option<Section<'a>>> {
        let path = self.key(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::Table(t)) => Ok(Some(self.child(path, key, t))),
            Some(v) => self.report(ConfigError::invalid(
                path,
                format!("expected a table ([{key}]), found {}", type_name(v)),
            )),
        }
    }

    /// `[[key]]`: an array of tables, each with path `key[i]`.
    fn array_of_tables(&mut self, key: &'static str) -> Result<Vec<Section<'a>>> {
        let path = self.key(key);
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| match v {
                    Value::Table(t) => Some(self.child(format!("{path}[{i}]"), key, t)),
                    other => {
                        self.sink.borrow_mut().push(ConfigError::invalid(
                            format!("{path}[{i}]"),
                            format!("expected a table, found {}", type_name(other)),
                        ));
                        None
                    }
                })
                .collect()),
            Some(v) => {
                self.sink.borrow_mut().push(ConfigError::invalid(
                    path.clone(),
                    format!(
                        "expected an array of tables ([[{path}]]), found {}",
                        type_name(v)
                    ),
                ));
                Ok(Vec::new())
            }
        }
    }

    /// Every entry of this table as a sub-table keyed by its name (used
    /// where the keys are data, such as symbols, so none is unknown).
    fn into_tables(self) -> Result<BTreeMap<String, Section<'a>>> {
        let mut out = BTreeMap::new();
        for (k, v) in self.table.iter() {
            let path = self.key(k);
            match v {
                Value::Table(t) => {
                    out.insert(k.clone(), self.child(path, "*", t));
                }
                other => self.sink.borrow_mut().push(ConfigError::invalid(
                    path,
                    format!("expected a table of thresholds, found {}", type_name(other)),
                )),
            }
        }
        Ok(out)
    }

    /// The end of a table's walk. Unknown keys were refused before the
    /// walk (`check_keys`); a key of the table that no parser read would
    /// be accepted and ignored, which the table must not allow.
    fn finish(self) -> Result<()> {
        debug_assert!(
            self.table
                .keys()
                .all(|k| self.asked.contains(&k.as_str()) || self.pattern.starts_with("fills")),
            "[{}]: a key in WALKED_KEYS that no parser reads: {:?} (read: {:?})",
            self.pattern,
            self.table.keys().collect::<Vec<_>>(),
            self.asked
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[[feed]]
name = "fx"
mode = "full"
[[feed.line]]
name = "A"
group = "239.1.1.1"
port = 31001
"#;

    fn err_of(text: &str) -> ConfigError {
        Config::parse(text).expect_err("config should be refused")
    }

    #[test]
    fn fills_http_takes_a_unix_socket_and_a_per_client_cap() {
        let base = format!("{MINIMAL}\n[fills]\ndb = \"sqlite:/tmp/x.db\"\n[fills.http]\n");
        let c = Config::parse(&format!(
            "{base}max_connections = 100\nsocket = \"/run/tickgate/fills.sock\"\nsocket_mode = \"0600\"\n"
        ))
        .unwrap();
        let http = &c.fills.as_ref().unwrap().http;
        assert_eq!(http.socket, Some(PathBuf::from("/run/tickgate/fills.sock")));
        assert_eq!(http.socket_mode, 0o600);
        // Three quarters of the cap unless given.
        assert_eq!(http.limits.max_connections_per_client, 75);
        let c = Config::parse(&format!(
            "{base}max_connections = 100\nmax_connections_per_client = 10\n"
        ))
        .unwrap();
        assert_eq!(c.fills.unwrap().http.limits.max_connections_per_client, 10);
        let e = err_of(&format!(
            "{base}max_connections = 100\nmax_connections_per_client = 101\n"
        ));
        assert!(
            e.to_string()
                .contains("fills.http.max_connections_per_client"),
            "{e}"
        );
        let e = err_of(&format!("{base}socket = \"/run/tickgate/gate.sock\"\n"));
        assert!(
            e.to_string()
                .contains("fills.http.socket: /run/tickgate/gate.sock is also gate.socket"),
            "{e}"
        );
        let e = err_of(&format!("{base}socket_mode = \"0400\"\n"));
        assert!(e.to_string().contains("fills.http.socket_mode"), "{e}");
    }

    #[test]
    fn minimal_config_gets_the_spec_defaults() {
        let c = Config::parse(MINIMAL).unwrap();
        let f = &c.feeds[0];
        assert_eq!(f.mode, FeedMode::Full);
        assert_eq!(f.liveness, Liveness::Symbol);
        assert_eq!((f.stale_ms, f.source_max_age_ms), (500, 2000));
        assert_eq!(f.max_seq_jump, 1_000_000);
        assert_eq!(f.clock_offset, ClockOffset::Auto);
        assert_eq!(f.lines[0].interface, None);
        assert_eq!(c.gate.socket, PathBuf::from("/run/tickgate/gate.sock"));
        assert_eq!(c.gate.socket_mode, 0o660);
        assert_eq!(c.gate.server_mode, ServerMode::Blocking);
        assert_eq!(c.log.format, LogFormat::Human);
        assert!(c.metrics.listen.is_some());
        assert!(c.fills.is_none());
    }

    #[test]
    fn full_config_parses_every_key() {
        let text = r#"
[[feed]]
name = "fx"
mode = "delta"
liveness = "channel"
stale_ms = 250
source_max_age_ms = 1500
max_seq_jump = 5000
clock_offset = -3
max_symbols = 100
busy_poll = true
cpu = 2
fifo_priority = 10
[[feed.line]]
name = "A"
group = "232.1.1.1"
port = 31001
interface = "10.0.0.5"
source = "10.9.9.9"
rcvbuf = 8388608
[[feed.line]]
name = "B"
group = "239.1.1.2"
port = 31002
interface = "eth1"
[feed.symbols.EURUSD]
stale_ms = 100
[feed.symbols.USDJPY]

[[feed]]
name = "eq"
mode = "full"
clock_offset = "off"
[[feed.line]]
name = "A"
group = "239.2.2.2"
port = 31001

[gate]
socket = "/tmp/x/gate.sock"
socket_mode = "0600"
server_mode = "busy_poll"
cpu = 3
max_connections = 16

[metrics]
listen = "[::1]:9100"

[log]
format = "json"
level = "tickgate=debug,warn"

[fills]
enabled = false
"#;
        let c = Config::parse(text).unwrap();
        let f = &c.feeds[0];
        assert_eq!(f.mode, FeedMode::Delta);
        assert_eq!(f.liveness, Liveness::Channel);
        assert_eq!(f.clock_offset, ClockOffset::FixedMs(-3));
        assert!(f.busy_poll);
        assert_eq!(f.cpu, Some(2));
        assert_eq!(f.fifo_priority, Some(10));
        assert_eq!(f.lines[0].source, Some("10.9.9.9".parse().unwrap()));
        assert_eq!(f.lines[0].rcvbuf, Some(8388608));
        assert_eq!(
            f.lines[1].interface,
            Some(InterfaceSpec::Name("eth1".into()))
        );
        assert_eq!(f.symbols.len(), 2);
        let eur = Symbol::parse("EURUSD").unwrap();
        assert_eq!(
            f.thresholds_for(eur),
            Thresholds {
                stale_ms: 100,
                source_max_age_ms: 1500
            }
        );
        assert_eq!(c.feeds[1].clock_offset, ClockOffset::Off);
        assert_eq!(c.gate.socket_mode, 0o600);
        assert_eq!(c.gate.server_mode, ServerMode::BusyPoll);
        assert_eq!(c.gate.cpu, Some(3));
        assert_eq!(c.gate.max_connections, 16);
        assert_eq!(c.metrics.listen, Some("[::1]:9100".parse().unwrap()));
        assert_eq!(c.log.format, LogFormat::Json);
        assert!(c.fills.is_none(), "enabled = false switches the lane off");
    }

    #[test]
    fn errors_name_the_key_path() {
        let cases: &[(&str, &str, &str)] = &[
            (
                r#"group = "10.0.0.1""#,
                "feed[0].line[0].group",
                "not a multicast",
            ),
            (r#"group = "nope""#, "feed[0].line[0].group", "not an IPv4"),
            (r#"group = "ff3e::1""#, "feed[0].line[0].group", "only IPv4"),
            (r#"port = 0"#, "feed[0].line[0].port", "out of range"),
            (r#"port = "x""#, "feed[0].line[0].port", "whole number"),
            (r#"colour = 1"#, "feed[0].line[0].colour", "unknown key"),
            (
                r#"interface = "224.0.0.1""#,
                "feed[0].line[0].interface",
                "local interface",
            ),
            (
                r#"interface = "a/b""#,
                "feed[0].line[0].interface",
                "interface name",
            ),
            (
                r#"interface = "::1""#,
                "feed[0].line[0].interface",
                "only IPv4",
            ),
            (
                r#"source = "239.0.0.9""#,
                "feed[0].line[0].source",
                "unicast",
            ),
            (r#"rcvbuf = -1"#, "feed[0].line[0].rcvbuf", "out of range"),
        ];
        for (line_key, key, needle) in cases {
            // Replace or add the key in the line table.
            let mut text = String::from(
                "[[feed]]\nname = \"fx\"\nmode = \"full\"\n[[feed.line]]\nname = \"A\"\n",
            );
            let k = line_key.split(' ').next().unwrap();
            if k != "group" {
                text.push_str("group = \"239.1.1.1\"\n");
            }
            if k != "port" {
                text.push_str("port = 31001\n");
            }
            text.push_str(line_key);
            text.push('\n');
            let e = err_of(&text);
            assert_eq!(e.key(), Some(*key), "{line_key}: {e}");
            assert!(e.to_string().contains(needle), "{line_key}: {e}");
        }
    }

    /// recovery.md "Settings" on venue feeds: defaults, a whole valid
    /// table, and the keys a venue does not take.
    #[test]
    fn recovery_keys_on_venue_feeds() {
        let venue = |v: &str, extra: &str| {
            MINIMAL.replace("mode = \"full\"\n", &format!("venue = \"{v}\"\n{extra}\n"))
        };
        let c = Config::parse(&venue("nasdaq-itch", "")).unwrap();
        let f = &c.feeds[0];
        assert_eq!((f.gap_hold_us, f.gap_hold_packets), (1000, 10_000));
        assert!(f.rerequest.is_empty() && f.snapshot.is_none());
        let c = Config::parse(&venue(
            "nasdaq-itch",
            "gap_hold_us = 250\nrerequest = [\"127.0.0.1:9000\", \"127.0.0.2:9001\"]\nrerequest_timeout_ms = 20\nrerequest_attempts = 5\nsnapshot = { address = \"127.0.0.1:9100\", username = \"user01\", password = \"secret\" }",
        ))
        .unwrap();
        let f = &c.feeds[0];
        assert_eq!(f.rerequest.len(), 2);
        let s = f.feed_settings();
        assert_eq!(s.recovery.gap_hold_us, 250);
        assert_eq!(s.recovery.rerequest_servers, 2);
        assert_eq!(
            (
                s.recovery.rerequest_timeout_ms,
                s.recovery.rerequest_attempts
            ),
            (20, 5)
        );
        assert!(s.recovery.snapshot);
        assert_eq!(f.snapshot.as_ref().unwrap().username, "user01");
        // R5's bounds default to 512 and 256 MiB; R2's cap to 2000 ms.
        let snap = f.snapshot.as_ref().unwrap();
        assert_eq!(
            (snap.hold_mib, snap.max_mib, f.max_hole_ms),
            (512, 256, 2000)
        );
        assert_eq!(s.recovery.snapshot_hold_bytes, 512 << 20);
        let c = Config::parse(&venue(
            "nasdaq-itch",
            "max_hole_ms = 500\nsnapshot = { address = \"127.0.0.1:9100\", username = \"u\", password = \"p\", hold_mib = 64, max_mib = 32 }",
        ))
        .unwrap();
        let f = &c.feeds[0];
        let snap = f.snapshot.as_ref().unwrap();
        assert_eq!((snap.hold_mib, snap.max_mib, f.max_hole_ms), (64, 32, 500));
        let s = f.feed_settings();
        assert_eq!(
            (s.recovery.max_hole_ms, s.recovery.snapshot_hold_bytes),
            (500, 64 << 20)
        );
        let e = err_of(&venue("nasdaq-itch", "max_hole_ms = 0"));
        assert_eq!(e.key(), Some("feed[0].max_hole_ms"), "{e}");
        assert_eq!(
            Config::parse(MINIMAL).unwrap().feeds[0].gap_hold_us,
            0,
            "tickgate feeds hold nothing by default"
        );
        let e = err_of(&venue("iex-tops", "rerequest = [\"127.0.0.1:9000\"]"));
        assert_eq!(e.key(), Some("feed[0].rerequest"), "{e}");
        let e = err_of(&venue(
            "nasdaq-itch",
            "snapshot = { address = \"127.0.0.1:9100\", username = \"toolonguser\", password = \"p\" }",
        ));
        assert_eq!(e.key(), Some("feed[0].snapshot.username"), "{e}");
        let e = err_of(&venue(
            "nasdaq-itch",
            "snapshot = { address = \"127.0.0.1:9100\", username = \"u\", password = \"p\", port = 1 }",
        ));
        assert_eq!(e.key(), Some("feed[0].snapshot.port"), "{e}");
    }

    #[test]
    fn feed_level_errors() {
        let with = |extra: &str| {
            MINIMAL.replace("mode = \"full\"\n", &format!("mode = \"full\"\n{extra}\n"))
        };
        let cases: &[(&str, &str, &str)] = &[
            ("stale_ms = 0", "feed[0].stale_ms", "out of range"),
            ("stale_ms = 1.5", "feed[0].stale_ms", "whole number"),
            ("liveness = \"both\"", "feed[0].liveness", "symbol, channel"),
            (
                "clock_offset = \"sometimes\"",
                "feed[0].clock_offset",
                "\"auto\"",
            ),
            (
                "clock_offset = 90000000",
                "feed[0].clock_offset",
                "more than a day",
            ),
            ("max_symbols = 0", "feed[0].max_symbols", "out of range"),
            ("max_seq_jump = 1", "feed[0].max_seq_jump", "out of range"),
            // C3b, recovery.md "Settings".
            (
                "max_channel_jump = 1",
                "feed[0].max_channel_jump",
                "out of range",
            ),
            ("gap_hold_us = -1", "feed[0].gap_hold_us", "out of range"),
            (
                "gap_hold_us = 600000000",
                "feed[0].gap_hold_us",
                "out of range",
            ),
            (
                "gap_hold_packets = 0",
                "feed[0].gap_hold_packets",
                "out of range",
            ),
            (
                "rerequest = \"10.0.0.9:9000\"",
                "feed[0].rerequest",
                "array",
            ),
            (
                "rerequest = [\"10.0.0.9\"]",
                "feed[0].rerequest[0]",
                "ip:port",
            ),
            (
                "rerequest = [\"10.0.0.9:0\"]",
                "feed[0].rerequest[0]",
                "with a port",
            ),
            (
                "rerequest_timeout_ms = 0",
                "feed[0].rerequest_timeout_ms",
                "out of range",
            ),
            (
                "rerequest_attempts = 0",
                "feed[0].rerequest_attempts",
                "out of range",
            ),
            (
                "snapshot = { address = \"10.0.0.9:9000\", username = \"u\", password = \"p\" }",
                "feed[0].snapshot",
                "nasdaq-itch feeds only",
            ),
            ("fifo_priority = 0", "feed[0].fifo_priority", "out of range"),
            (
                "fifo_priority = 100",
                "feed[0].fifo_priority",
                "out of range",
            ),
            ("name2 = 1", "feed[0].name2", "unknown key"),
            (
                "[feed.symbols.TOOLONGSYM]",
                "feed[0].symbols.TOOLONGSYM",
                "not a symbol",
            ),
            (
                "[feed.symbols.EURUSD]\nstale = 3",
                "feed[0].symbols.EURUSD.stale",
                "unknown key",
            ),
            (
                "[feed.symbols]\nEURUSD = 3",
                "feed[0].symbols.EURUSD",
                "table of thresholds",
            ),
        ];
        for (extra, key, needle) in cases {
            let e = err_of(&with(extra));
            assert_eq!(e.key(), Some(*key), "{extra}: {e}");
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        let e = err_of(&MINIMAL.replace("mode = \"full\"", "mode = \"fast\""));
        assert_eq!(e.key(), Some("feed[0].mode"));
        let e = err_of(&MINIMAL.replace("mode = \"full\"\n", ""));
        assert_eq!(e.to_string(), "feed[0].mode: missing");
        let e = err_of(&MINIMAL.replace("name = \"fx\"", "name = \"f x\""));
        assert_eq!(e.key(), Some("feed[0].name"));
    }

    /// venues.md `cboe-pitch` and recovery.md Settings: realtime and gap
    /// lines, grp and spin, and every refusal named by its key.
    #[test]
    fn cboe_pitch_feeds() {
        const PITCH: &str = r#"
[[feed]]
name = "bzx"
venue = "cboe-pitch"
EXTRA
[[feed.line]]
name = "A"
group = "239.39.62.190"
port = 32001
[[feed.line]]
name = "G"
group = "239.39.62.191"
port = 32001
kind = "gap"
"#;
        let grp = r#"grp = { address = "10.0.0.9:10503", session_sub_id = "0006", username = "MKDA", password = "" }"#;
        let spin = r#"spin = { session_sub_id = "0023", username = "BATS", password = "secret", servers = { "2" = "10.0.0.9:18999", "1" = "10.0.0.9:18998" } }"#;
        let c = Config::parse(&PITCH.replace("EXTRA", &format!("{grp}\n{spin}"))).unwrap();
        let f = &c.feeds[0];
        assert_eq!(f.venue, VenueKind::CboePitch);
        assert_eq!(
            (f.lines[0].kind, f.lines[1].kind),
            (LineKind::Incremental, LineKind::Gap)
        );
        // venues.md: the defaults of a venue feed.
        assert_eq!(
            (f.liveness, f.stale_ms, f.gap_hold_us),
            (Liveness::Channel, 1500, 1000)
        );
        let g = f.grp.as_ref().unwrap();
        assert_eq!(g.max_count, DEFAULT_GRP_MAX_COUNT);
        assert_eq!(g.login, Login::new("0006", "MKDA", "").unwrap());
        let s = f.spin.as_ref().unwrap();
        assert_eq!(
            s.servers,
            vec![
                (1, "10.0.0.9:18998".parse().unwrap()),
                (2, "10.0.0.9:18999".parse().unwrap())
            ]
        );
        assert_eq!((s.hold_mib, s.max_mib), (512, 256));
        let realtime = PITCH.replace("EXTRA", "").replace(
            "port = 32001\n[[feed.line]]",
            "port = 32001\nkind = \"realtime\"\n[[feed.line]]",
        );
        assert_eq!(
            Config::parse(&realtime).unwrap().feeds[0].lines[0].kind,
            LineKind::Incremental
        );
        let cases: &[(&str, &str, &str)] = &[
            (
                "rerequest = [\"10.0.0.9:9000\"]",
                "feed[0].rerequest",
                "use grp",
            ),
            (
                "snapshot = { address = \"10.0.0.9:9000\", username = \"u\", password = \"p\" }",
                "feed[0].snapshot",
                "use spin",
            ),
            (
                &grp.replace("\"MKDA\"", "\"MKDAX\""),
                "feed[0].grp.username",
                "at most 4",
            ),
            (
                &grp.replace("\"0006\"", "\"00006\""),
                "feed[0].grp.session_sub_id",
                "at most 4",
            ),
            (
                &grp.replace("password = \"\"", "password = \"12345678901\""),
                "feed[0].grp.password",
                "at most 10",
            ),
            (
                &grp.replace("\"MKDA\"", "\"MK A\""),
                "feed[0].grp.username",
                "printable",
            ),
            (
                &grp.replace("\"MKDA\"", "\"\""),
                "feed[0].grp.username",
                "empty",
            ),
            (
                &grp.replace("10.0.0.9:10503", "gap-proxy"),
                "feed[0].grp.address",
                "ip:port",
            ),
            (
                &format!("{}, max_count = 0 }}", grp.trim_end_matches(" }")),
                "feed[0].grp.max_count",
                "out of range",
            ),
            (
                &spin.replace("\"2\" = ", "\"0\" = "),
                "feed[0].spin.servers.0",
                "unit 0 has no Spin Server",
            ),
            (
                &spin.replace("\"2\" = ", "\"256\" = "),
                "feed[0].spin.servers.256",
                "not a unit",
            ),
            (
                &spin.replace("\"BATS\"", "\"BATSX\""),
                "feed[0].spin.username",
                "at most 4",
            ),
            ("max_orders = 0", "feed[0].max_orders", "out of range"),
        ];
        for (extra, key, needle) in cases {
            let e = err_of(&PITCH.replace("EXTRA", extra));
            assert_eq!(e.key(), Some(*key), "{extra}: {e}");
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        // A gap line alone cannot begin a unit's session.
        let gap_only = PITCH.replace("EXTRA", "").replace(
            "port = 32001\n[[feed.line]]",
            "port = 32001\nkind = \"gap\"\n[[feed.line]]",
        );
        let e = err_of(&gap_only);
        assert_eq!(e.key(), Some("feed[0].line"), "{e}");
        assert!(e.to_string().contains("kind = \"realtime\""), "{e}");
        // grp, spin and gap lines on other venues.
        let with = |extra: &str| {
            MINIMAL.replace("mode = \"full\"\n", &format!("mode = \"full\"\n{extra}\n"))
        };
        let e = err_of(&with(grp));
        assert_eq!(e.key(), Some("feed[0].grp"), "{e}");
        assert!(e.to_string().contains("cboe-pitch feeds only"), "{e}");
        let e = err_of(&with(spin));
        assert_eq!(e.key(), Some("feed[0].spin"), "{e}");
        assert!(e.to_string().contains("cboe-pitch feeds only"), "{e}");
        let e = err_of(&format!("{MINIMAL}kind = \"gap\"\n"));
        assert_eq!(e.key(), Some("feed[0].line"), "{e}");
        assert!(e.to_string().contains("cboe-pitch feeds only"), "{e}");
        let e = err_of(
            &PITCH
                .replace("EXTRA", "")
                .replace("kind = \"gap\"", "kind = \"snapshot\""),
        );
        assert!(e.to_string().contains("cme-mdp3 feeds only"), "{e}");
    }

    #[test]
    fn cross_section_errors() {
        let e = err_of("[gate]\n");
        assert_eq!(e.key(), Some("feed"));
        let two = format!("{MINIMAL}{MINIMAL}");
        let e = err_of(&two);
        assert_eq!(e.key(), Some("feed[1].name"));
        let e = err_of(&format!("{MINIMAL}{}", MINIMAL.replace("\"fx\"", "\"fy\"")));
        assert_eq!(e.key(), Some("feed[1].line[0]"), "{e}");
        assert!(e.to_string().contains("already used by feed[0].line[0]"));
        let dup_line =
            format!("{MINIMAL}[[feed.line]]\nname = \"A\"\ngroup = \"239.1.1.2\"\nport = 1\n");
        assert_eq!(err_of(&dup_line).key(), Some("feed[0].line[1].name"));
        let no_lines = "[[feed]]\nname = \"fx\"\nmode = \"full\"\n";
        assert_eq!(err_of(no_lines).key(), Some("feed[0].line"));
        let sym_twice = format!(
            "{MINIMAL}[feed.symbols.EURUSD]\n{}[feed.symbols.EURUSD]\n",
            MINIMAL
                .replace("\"fx\"", "\"fy\"")
                .replace("239.1.1.1", "239.1.1.9")
        );
        // gate.md "One symbol on several feeds": several feeds may name it.
        let c = Config::parse(&sym_twice).unwrap();
        assert!(c.feeds.iter().all(|f| f.symbols.len() == 1));
        // [gate] across and crossed_ms.
        let c = Config::parse(&format!(
            "{MINIMAL}[gate]\nacross = \"any\"\ncrossed_ms = 0\n"
        ))
        .unwrap();
        assert_eq!(
            c.gate.rules,
            crate::feed::across::GateRules::new(crate::feed::across::Across::Any, 0)
        );
        let e = err_of(&format!("{MINIMAL}[gate]\nacross = \"most\"\n"));
        assert_eq!(e.key(), Some("gate.across"), "{e}");
        assert!(e.to_string().contains("all, any"), "{e}");
        let e = err_of(&format!("{MINIMAL}[gate]\ncrossed_ms = -1\n"));
        assert_eq!(e.key(), Some("gate.crossed_ms"), "{e}");
        let too_many = MINIMAL.replace("mode = \"full\"", "mode = \"full\"\nmax_symbols = 1")
            + "[feed.symbols.A]\n[feed.symbols.B]\n";
        assert_eq!(err_of(&too_many).key(), Some("feed[0].max_symbols"));
    }

    #[test]
    fn other_sections() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "[gate]\nsocket_mode = \"0999\"",
                "gate.socket_mode",
                "octal",
            ),
            (
                "[gate]\nsocket_mode = \"1777\"",
                "gate.socket_mode",
                "octal",
            ),
            (
                "[gate]\nsocket_mode = \"0440\"",
                "gate.socket_mode",
                "owner",
            ),
            (
                "[gate]\nserver_mode = \"spin\"",
                "gate.server_mode",
                "busy_poll",
            ),
            ("[gate]\nsocket = \"\"", "gate.socket", "empty"),
            (
                "[metrics]\nlisten = \"localhost\"",
                "metrics.listen",
                "address:port",
            ),
            (
                "[metrics]\nenabled = \"yes\"",
                "metrics.enabled",
                "true or false",
            ),
            ("[log]\nformat = \"xml\"", "log.format", "human, json"),
            ("[log]\nlevel = \"=\"", "log.level", "log filter"),
            ("[logging]\n", "logging", "unknown key"),
            ("gate = 1", "gate", "expected a table"),
        ];
        for (extra, key, needle) in cases {
            // Top-level keys must come before the [[feed]] tables.
            let text = if extra.starts_with('[') {
                format!("{MINIMAL}{extra}\n")
            } else {
                format!("{extra}\n{MINIMAL}")
            };
            let e = err_of(&text);
            assert_eq!(e.key(), Some(*key), "{extra}: {e}");
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        let e = err_of("feed = 1\n");
        assert_eq!(e.key(), Some("feed"));
        assert!(e.to_string().contains("array of tables"), "{e}");
        let long = format!("[gate]\nsocket = \"/{}\"\n", "x".repeat(120));
        assert_eq!(
            err_of(&format!("{MINIMAL}{long}")).key(),
            Some("gate.socket")
        );
        let octal_literal =
            Config::parse(&format!("{MINIMAL}[gate]\nsocket_mode = 0o640\n")).unwrap();
        assert_eq!(octal_literal.gate.socket_mode, 0o640);
        let off = Config::parse(&format!("{MINIMAL}[metrics]\nenabled = false\n")).unwrap();
        assert_eq!(off.metrics.listen, None);
    }

    /// `run`, `--check-config` and a reload (SIGHUP) read the file through
    /// `Config::load`: a FIFO is refused without waiting for a writer, a
    /// device or an oversized file without reading it.
    #[test]
    fn load_reads_only_a_bounded_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.toml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A writer that meets a blocking reader (so that a reader which
        // waits for one gets a file, and a message without "FIFO", rather
        // than waiting for ever); a reader that does not wait leaves it
        // blocked in open, harmlessly, until the test process ends.
        let w = fifo.clone();
        std::thread::spawn(move || {
            if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&w) {
                let _ = std::io::Write::write_all(&mut f, b"[gate]\n");
            }
        });
        let e = Config::load(&fifo).unwrap_err().to_string();
        assert_eq!(
            e,
            "cannot read: it is a FIFO; a config must be a regular file"
        );
        let e = Config::load(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("it is a device"), "{e}");
        let e = Config::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("it is a directory"), "{e}");
        let big = dir.path().join("big.toml");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_CONFIG_BYTES + 1).unwrap();
        let e = Config::load(&big).unwrap_err().to_string();
        assert!(e.contains("more than a config may have"), "{e}");
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, b"# one\n# two\n\xff\n").unwrap();
        let e = Config::load(&bad).unwrap_err().to_string();
        assert_eq!(e, "cannot read: line 3 is not UTF-8");
    }

    #[test]
    fn syntax_errors_give_the_line() {
        let e = err_of("[[feed]\nname = 1\n");
        assert!(matches!(e, ConfigError::Syntax { .. }));
        assert!(
            e.to_string()
                .starts_with("TOML syntax error at line 1, column"),
            "{e}"
        );
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
        let e = err_of("[gate]\nsocket = \"/x\"\nsocket = \"/y\"\n");
        assert!(e.to_string().contains("at line 3, column 1"), "{e}");
    }

    /// The keys `config/tickgate.toml` shows (set or commented out), as
    /// (table pattern, key): each line with its leading `#`s taken off
    /// that is a table header or parses as TOML on its own.
    fn example_keys() -> std::collections::BTreeSet<(String, String)> {
        fn pattern_of(header: &str) -> String {
            let mut pattern = String::new();
            for seg in header.split('.') {
                let seg = seg.trim();
                let seg = if keys_of(&pattern).is_some_and(|k| k == ["*"]) {
                    "*"
                } else {
                    seg
                };
                if !pattern.is_empty() {
                    pattern.push('.');
                }
                pattern.push_str(seg);
            }
            pattern
        }
        fn record(
            t: &Table,
            pattern: &str,
            out: &mut std::collections::BTreeSet<(String, String)>,
        ) {
            for (k, v) in t {
                out.insert((pattern.to_string(), k.clone()));
                let sub = if pattern.is_empty() {
                    k.clone()
                } else {
                    pattern_of(&format!("{pattern}.{k}"))
                };
                match v {
                    Value::Table(t) => record(t, &sub, out),
                    Value::Array(items) => {
                        for item in items {
                            if let Value::Table(t) = item {
                                record(t, &sub, out);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/tickgate.toml"))
                .unwrap();
        let mut out = std::collections::BTreeSet::new();
        let mut section = String::new();
        for line in text.lines() {
            let l = line.trim_start_matches(|c: char| c == '#' || c.is_whitespace());
            let header = l
                .strip_prefix("[[")
                .and_then(|r| r.split_once("]]"))
                .or_else(|| l.strip_prefix('[').and_then(|r| r.split_once(']')))
                .map(|(h, _)| h);
            if let Some(h) = header.filter(|h| !h.contains(' ')) {
                section = pattern_of(h);
                // The header names a key of each table above it.
                let segs: Vec<&str> = h.split('.').collect();
                for i in 0..segs.len() {
                    let parent = pattern_of(&segs[..i].join("."));
                    let parent = if i == 0 { String::new() } else { parent };
                    out.insert((parent, segs[i].trim().to_string()));
                }
            } else if let Ok(t) = toml::from_str::<Table>(l) {
                record(&t, &section, &mut out);
            }
        }
        out
    }

    /// `config/tickgate.toml` is the commented example of every key: each
    /// key the config takes is in it (set, or commented out in its table),
    /// and it shows no key the config refuses.
    #[test]
    fn the_example_config_holds_every_key() {
        let shown = example_keys();
        let mut missing = Vec::new();
        let mut accepted = std::collections::BTreeSet::new();
        for (pattern, keys) in all_keys() {
            for key in keys {
                accepted.insert((pattern.to_string(), key.to_string()));
                if key != "*" && !shown.contains(&(pattern.to_string(), key.to_string())) {
                    missing.push(format!("[{pattern}] {key}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "accepted but not in config/tickgate.toml: {}",
            missing.join(", ")
        );
        let refused: Vec<String> = shown
            .iter()
            .filter(|(p, k)| {
                !accepted.contains(&(p.clone(), k.clone()))
                    && !accepted.contains(&(p.clone(), "*".to_string()))
            })
            .map(|(p, k)| format!("[{p}] {k}"))
            .collect();
        assert!(
            refused.is_empty(),
            "in config/tickgate.toml but refused: {}",
            refused.join(", ")
        );
    }

    /// The lists an unknown key's message quotes are the whole table's:
    /// the walk's own keys, serde's fields and the keys read beside them.
    #[test]
    fn unknown_keys_quote_every_key_of_their_table() {
        let e = Config::parse(&format!(
            "{MINIMAL}[fills]\nbogus = 1\n[fills.http]\nheader_timeout = \"5s\"\nbogus2 = 2\n"
        ))
        .unwrap_err();
        let problems = e.problems();
        let keys: Vec<_> = problems.iter().filter_map(|p| p.key()).collect();
        assert_eq!(keys, ["fills.bogus", "fills.http.bogus2"], "{e}");
        let fills = problems[0].to_string();
        for k in [
            "enabled",
            "db",
            "max_batch",
            "max_in_flight",
            "http",
            "retention",
        ] {
            assert!(fills.contains(k), "{k} missing from {fills}");
        }
        let http = problems[1].to_string();
        for k in [
            "listen",
            "clients",
            "allow_remote",
            "header_timeout",
            "body_timeout",
            "idle_timeout",
            "max_connections",
            "max_connections_per_client",
            "rate_per_client",
            "rate_burst",
            "socket",
            "socket_mode",
            "max_body_bytes",
        ] {
            assert!(http.contains(k), "{k} missing from {http}");
        }
        // An unknown key is reported even where the table has another
        // problem that ends its walk.
        let e = Config::parse(
            "[[feed]]\nname = \"a\"\nmode = \"sideways\"\nbogus = 1\n[[feed.line]]\nname = \"A\"\ngroup = \"239.1.1.1\"\nport = 1\n",
        )
        .unwrap_err();
        let keys: Vec<_> = e.problems().iter().filter_map(|p| p.key()).collect();
        assert_eq!(keys, ["feed[0].mode", "feed[0].bogus"], "{e}");
        let e = err_of("[[feed]]\nname = \"a\"\nvenue = \"x\"\n");
        assert!(e.to_string().contains("cme-mdp3"), "{e}");
    }

    #[test]
    fn fills_section_switch() {
        let c = Config::parse(&format!("{MINIMAL}[fills]\n")).unwrap();
        assert!(c.fills.is_some());
        // The fills lane alone is something to run; nothing at all is not.
        let c = Config::parse("[fills]\ndb = \"sqlite:/tmp/x.db\"\n").unwrap();
        assert!(c.feeds.is_empty());
        assert_eq!(c.fills.unwrap().db, "sqlite:/tmp/x.db");
        assert_eq!(err_of("[fills]\nenabled = false\n").key(), Some("feed"));
        let e = err_of("[fills]\nbogus = 1\n");
        assert_eq!(e.key(), Some("fills.bogus"), "{e}");
        assert!(
            e.to_string().contains("unknown key (expected one of: "),
            "{e}"
        );
        let e = err_of("[fills]\ndb = \"mysql://x\"\n");
        assert_eq!(e.key(), Some("fills.db"), "{e}");
    }

    #[test]
    fn fills_type_errors_name_the_key() {
        let cases: &[(&str, &str)] = &[
            (
                "max_batch = \"many\"",
                "fills.max_batch: expected a whole number, got \"many\"",
            ),
            (
                "max_batch = 0",
                "fills.max_batch: must be >= 1",
            ),
            (
                "[fills.http]\nlisten = \"not-an-addr\"",
                "fills.http.listen: \"not-an-addr\" is not an address:port",
            ),
            (
                "[fills.http]\nlisten = \"0.0.0.0:8088\"",
                "fills.http.listen: 0.0.0.0:8088 is not a loopback address; set allow_remote = true",
            ),
            (
                "[fills.http]\nmax_body_bytes = true",
                "fills.http.max_body_bytes: expected a whole number, got true",
            ),
            (
                "[[fills.http.clients]]\ntoken = \"t\"",
                "fills.http.clients[0].name: missing",
            ),
            (
                "[fills.retention]\npause = \"5 parsecs\"",
                "fills.retention.pause: ",
            ),
            (
                "[fills.nats]\nmax_deliver = \"x\"",
                "fills.nats.max_deliver: expected a whole number, got \"x\"",
            ),
        ];
        for (body, needle) in cases {
            let text = format!("[fills]\n{body}\n");
            let e = err_of(&text);
            assert!(e.to_string().starts_with(needle), "{body}: {e}");
            assert_eq!(e.problems().len(), 1, "{body}: {e}");
        }
        let ok = Config::parse(
            "[fills]\n[fills.http]\nlisten = \"0.0.0.0:8088\"\nallow_remote = true\n",
        );
        assert!(ok.is_ok(), "{:?}", ok.err());
    }

    #[test]
    fn http_limits_are_read_from_their_tables() {
        let c = Config::parse(
            "[fills]\n[fills.http]\nheader_timeout = \"3s\"\nbody_timeout = 7\nmax_connections = 1500\nrate_per_client = 0\n[metrics]\nidle_timeout = \"90s\"\n",
        )
        .unwrap();
        let l = &c.fills.unwrap().http.limits;
        assert_eq!(l.header_timeout, std::time::Duration::from_secs(3));
        assert_eq!(l.body_timeout, std::time::Duration::from_secs(7));
        assert_eq!(l.max_connections, 1500);
        assert_eq!(l.rate_per_sec, 0);
        assert_eq!(
            c.metrics.limits.idle_timeout,
            std::time::Duration::from_secs(90)
        );
        let e = err_of("[fills]\n[fills.http]\nheader_timeout = \"soon\"\nmax_connections = 0\n");
        let keys: Vec<_> = e
            .problems()
            .iter()
            .map(|p| p.key().unwrap().to_string())
            .collect();
        assert_eq!(
            keys,
            ["fills.http.header_timeout", "fills.http.max_connections"],
            "{e}"
        );
    }

    #[test]
    fn every_problem_is_reported_in_file_order() {
        let text = r#"
[[feed]]
name = "fx"
mode = "full"
stale_ms = "soon"
[[feed.line]]
name = "A"
group = "10.0.0.1"
port = 31001
[[feed.line]]
name = "B"
group = "239.1.1.2"
port = "x"
rcvbuff = 1

[gate]
server_mode = "spin"

[metrics]
listen = "0.0.0.0:9477"

[fills]
max_batch = "many"
key_ttl = true
"#;
        let e = err_of(text);
        let keys: Vec<_> = e
            .problems()
            .iter()
            .map(|p| p.key().unwrap().to_string())
            .collect();
        assert_eq!(
            keys,
            [
                "feed[0].stale_ms",
                "feed[0].line[0].group",
                "feed[0].line[1].port",
                "feed[0].line[1].rcvbuff",
                "gate.server_mode",
                "metrics.listen",
                "fills.max_batch",
                "fills.key_ttl",
            ],
            "{e}"
        );
        assert_eq!(e.to_string().lines().count(), keys.len());
        let ok = Config::parse(&format!(
            "{MINIMAL}[metrics]\nlisten = \"0.0.0.0:9477\"\nallow_remote = true\n"
        ));
        assert!(ok.is_ok());
    }

    #[test]
    fn serde_entry_point_validates_too() {
        let c: Config = toml::from_str(MINIMAL).unwrap();
        assert_eq!(c.feeds[0].name, "fx");
        let e = toml::from_str::<Config>(&MINIMAL.replace("239.1.1.1", "10.0.0.1")).unwrap_err();
        assert!(e.to_string().contains("feed[0].line[0].group"), "{e}");
    }

    #[test]
    fn reload_applies_thresholds_and_lists_the_rest() {
        let old = Config::parse(MINIMAL).unwrap();
        let new_text = MINIMAL.replace(
            "mode = \"full\"",
            "mode = \"full\"\nstale_ms = 50\nmax_seq_jump = 10",
        )
            + "[feed.symbols.EURUSD]\nsource_max_age_ms = 10\n[gate]\nsocket = \"/tmp/g.sock\"\n";
        let new = Config::parse(&new_text).unwrap();
        let plan = old.reload_plan(&new);
        assert_eq!(plan.thresholds.len(), 1);
        assert_eq!(plan.thresholds[0].stale_ms, 50);
        assert_eq!(plan.thresholds[0].symbols.len(), 1);
        assert_eq!(plan.added_symbols, vec![(0, vec!["EURUSD".to_string()])]);
        assert_eq!(
            plan.needs_restart,
            vec!["feed[0].max_seq_jump".to_string(), "gate".to_string()]
        );
        assert_eq!(old.reload_plan(&old), ReloadPlan::default());
    }
}

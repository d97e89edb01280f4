//! Gate socket client: `tickgate check` and `tickgate status` (I/O).
//!
//! The socket is `--socket`, else `$TICKGATE_SOCKET`, else
//! `/run/tickgate/gate.sock` (gate.md).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use super::server::DEFAULT_SOCKET;

/// Environment variable overriding the default socket path.
pub const SOCKET_ENV: &str = "TICKGATE_SOCKET";

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The symbol to check (case-sensitive).
    pub symbol: String,
    /// Gate socket [default: $TICKGATE_SOCKET, else /run/tickgate/gate.sock].
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Tighten the staleness threshold for this check (ms).
    #[arg(long)]
    pub stale_ms: Option<u64>,
    /// Tighten the source-age threshold for this check (ms).
    #[arg(long)]
    pub source_ms: Option<u64>,
    /// Answer from this feed alone (its config name), when several feeds
    /// know the symbol.
    #[arg(long)]
    pub feed: Option<String>,
    /// Give up waiting for the answer after this many ms.
    #[arg(long, default_value_t = 5000)]
    pub timeout_ms: u64,
    /// Judge in this process from the shared state file instead of asking
    /// the socket (`--shm` alone: $TICKGATE_SHM, else state.shm next to
    /// the socket; `--shm=PATH` another file).
    #[arg(long, num_args = 0..=1, require_equals = true)]
    pub shm: Option<Option<PathBuf>>,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The shared state file to describe [default: $TICKGATE_SHM, else
    /// state.shm next to the socket].
    #[arg(long)]
    pub shm: Option<PathBuf>,
    /// Gate socket [default: $TICKGATE_SOCKET, else /run/tickgate/gate.sock].
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Print the server's lines as they come instead of a table.
    #[arg(long)]
    pub raw: bool,
    /// Give up waiting for the listing after this many ms.
    #[arg(long, default_value_t = 10000)]
    pub timeout_ms: u64,
}

/// `--socket`, else `$TICKGATE_SOCKET`, else the default path.
pub fn socket_path(arg: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    match std::env::var_os(SOCKET_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// The state file: `--shm=PATH`, else `$TICKGATE_SHM`, else `state.shm`
/// next to the socket (the daemon's default).
pub fn shm_path(arg: Option<&Path>, socket: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    match std::env::var_os(crate::client::PATH_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => crate::config::default_shm(&socket_path(socket)),
    }
}

fn connect(path: &Path, timeout_ms: u64) -> anyhow::Result<UnixStream> {
    let s = UnixStream::connect(path).map_err(|e| {
        let hint = match e.kind() {
            // The socket is there, and for the daemon's group only
            // (operations.md: `socket_mode`, the tickgate group).
            std::io::ErrorKind::PermissionDenied => format!(
                "this user may not open it: it is for the daemon's group (`ls -l {}`); add the user to that group (`sudo usermod -aG tickgate $USER`, then log in again) or run as a member",
                path.display()
            ),
            _ => format!("is tickgate running? --socket or ${SOCKET_ENV} select another"),
        };
        anyhow::Error::new(e).context(format!(
            "cannot connect to the gate socket {} ({hint})",
            path.display()
        ))
    })?;
    let t = Some(Duration::from_millis(timeout_ms.max(1)));
    s.set_read_timeout(t)?;
    s.set_write_timeout(t)?;
    Ok(s)
}

/// The request line of a check (gate.md "Requests").
pub fn check_request(
    symbol: &str,
    stale_ms: Option<u64>,
    source_ms: Option<u64>,
    feed: Option<&str>,
) -> anyhow::Result<String> {
    // A space or a control byte cannot be sent inside one request token.
    if symbol.is_empty() || !symbol.bytes().all(|c| c.is_ascii_graphic()) {
        bail!("invalid symbol {symbol:?}: printable ASCII without spaces expected");
    }
    let mut line = format!("CHECK {symbol}");
    if let Some(ms) = stale_ms {
        line += &format!(" stale_ms={ms}");
    }
    if let Some(ms) = source_ms {
        line += &format!(" source_ms={ms}");
    }
    if let Some(name) = feed {
        if name.is_empty() || !name.bytes().all(|c| c.is_ascii_graphic()) {
            bail!("invalid feed name {name:?}: printable ASCII without spaces expected");
        }
        line += &format!(" feed={name}");
    }
    line.push('\n');
    Ok(line)
}

/// Exit code of an answer line: 0 OK, 1 REJECT, 2 anything else.
pub fn exit_code(answer: &str) -> i32 {
    if answer.starts_with("OK ") {
        0
    } else if answer.starts_with("REJECT ") {
        1
    } else {
        2
    }
}

/// `tickgate check`: prints the answer line; exit 0 OK, 1 REJECT, 2 error.
pub fn check_main(args: CheckArgs) -> anyhow::Result<i32> {
    let request = check_request(
        &args.symbol,
        args.stale_ms,
        args.source_ms,
        args.feed.as_deref(),
    )?;
    if let Some(shm) = &args.shm {
        let path = shm_path(shm.as_deref(), args.socket.as_deref());
        let mut client = crate::client::Client::open(&path)?;
        let mut out = Vec::new();
        client.answer(
            request.trim_end().as_bytes(),
            crate::client::realtime_ns(),
            &mut out,
        )?;
        let answer = String::from_utf8_lossy(&out);
        let answer = answer.trim_end();
        println!("{answer}");
        return Ok(exit_code(answer));
    }
    let path = socket_path(args.socket.as_deref());
    let mut stream = connect(&path, args.timeout_ms)?;
    stream
        .write_all(request.as_bytes())
        .with_context(|| format!("sending the check to {}", path.display()))?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .with_context(|| format!("reading the answer from {}", path.display()))?;
    if !answer.ends_with('\n') {
        bail!("the gate closed the connection without answering");
    }
    let answer = answer.trim_end_matches(['\r', '\n']);
    println!("{answer}");
    Ok(exit_code(answer))
}

/// `tickgate status`: the `STATUS` listing as a table.
pub fn status_main(args: StatusArgs) -> anyhow::Result<i32> {
    let path = socket_path(args.socket.as_deref());
    let shm = crate::client::describe(&shm_path(args.shm.as_deref(), args.socket.as_deref()));
    let mut stream = match connect(&path, args.timeout_ms) {
        Ok(s) => s,
        Err(e) => {
            // The file says whether the daemon stopped.
            println!("{shm}");
            return Err(e);
        }
    };
    stream
        .write_all(b"STATUS\n")
        .with_context(|| format!("sending STATUS to {}", path.display()))?;
    let reader = BufReader::new(&stream);
    let mut lines = Vec::new();
    let mut ended = false;
    for line in reader.lines() {
        let line = line.with_context(|| format!("reading the listing from {}", path.display()))?;
        if line == "END" {
            ended = true;
            break;
        }
        if line.starts_with("ERR") {
            bail!("the gate answered {line}");
        }
        if args.raw {
            println!("{line}");
        } else {
            lines.push(line);
        }
    }
    if !ended {
        bail!("the listing was cut short (no END)");
    }
    if !args.raw {
        print!("{}", format_status(&lines));
    }
    println!("{shm}");
    Ok(0)
}

/// `key=value` fields of a listing line.
fn field<'a>(tokens: &[&'a str], key: &str) -> &'a str {
    tokens
        .iter()
        .find_map(|t| t.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or("")
}

/// Renders `FEED` / `SYMBOL` lines of `STATUS` as aligned tables.
pub fn format_status(lines: &[String]) -> String {
    let mut out = String::new();
    let header = [
        "FEED",
        "SYMBOL",
        "VERDICT",
        "REASONS",
        "SEQ",
        "BID",
        "ASK",
        "SILENCE_US",
        "SRC_AGE_US",
        "SUSPECT",
    ];
    let mut feeds = Vec::new();
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for line in lines {
        let tokens: Vec<&str> = line.split(' ').collect();
        match tokens.first() {
            Some(&"FEED") if tokens.len() >= 2 => feeds.push(format!(
                "feed {}: {} symbols, {}, channel silence {} us, clock offset {} us, recovery {}, line skew max {} us{}",
                tokens[1],
                field(&tokens, "symbols"),
                field(&tokens, "state"),
                field(&tokens, "channel_silence_us"),
                field(&tokens, "clock_offset_us"),
                field(&tokens, "recovery"),
                field(&tokens, "line_skew_max_us"),
                match field(&tokens, "waiting") {
                    "" | "0" => String::new(),
                    w => format!(
                        ", {w} instruments waiting for a snapshot ({} entries kept)",
                        field(&tokens, "kept_entries")
                    ),
                },
            )),
            // SYMBOL <feed> OK <sym> seq=... | SYMBOL <feed> REJECT <sym> <reasons> seq=...
            Some(&"SYMBOL") if tokens.len() >= 4 => {
                let verdict = tokens[2];
                let reasons = if verdict == "REJECT" {
                    tokens.get(4).copied().unwrap_or("")
                } else {
                    ""
                };
                rows.push(vec![
                    tokens[1].to_string(),
                    tokens[3].to_string(),
                    verdict.to_string(),
                    if reasons.is_empty() { "-" } else { reasons }.to_string(),
                    field(&tokens, "seq").to_string(),
                    field(&tokens, "bid").to_string(),
                    field(&tokens, "ask").to_string(),
                    field(&tokens, "silence_us").to_string(),
                    field(&tokens, "source_age_us").to_string(),
                    match field(&tokens, "suspect") {
                        "" => "-".to_string(),
                        c => c.to_string(),
                    },
                ]);
            }
            // R4c: GRP <feed> logged_in=.. count_limit=.. pause=.. pause_left_ms=..
            Some(&"GRP") if tokens.len() >= 2 => feeds.push(format!(
                "feed {}: Gap Request Proxy {}, count limit {}{}",
                tokens[1],
                if field(&tokens, "logged_in") == "1" {
                    "logged in"
                } else {
                    "not logged in"
                },
                field(&tokens, "count_limit"),
                match field(&tokens, "pause") {
                    "" | "-" => String::new(),
                    p => format!(
                        ", paused by {p} for {} ms",
                        field(&tokens, "pause_left_ms")
                    ),
                },
            )),
            // R5c: UNIT <feed> <unit> spin=..[:last_failure=..] spin_wait_ms=.. grp=..
            Some(&"UNIT") if tokens.len() >= 3 => {
                let spin = field(&tokens, "spin");
                let (state, failure) = match spin.split_once(":last_failure=") {
                    Some((s, f)) => (s, Some(f)),
                    None => (spin, None),
                };
                let wait = field(&tokens, "spin_wait_ms");
                let spin = match (state, failure) {
                    ("none", _) => "no spin server".to_string(),
                    ("idle", _) => "no spin needed".to_string(),
                    ("running", _) => "spin running".to_string(),
                    ("wanted", Some(f)) => {
                        format!("spin failed ({f}), next attempt in {wait} ms")
                    }
                    ("wanted", None) => format!("spin wanted, next attempt in {wait} ms"),
                    (other, _) => format!("spin {other}"),
                };
                let grp = match field(&tokens, "grp") {
                    "off" => ", Gap Request Proxy off until the unit's next session (I)",
                    _ => "",
                };
                feeds.push(format!("feed {} unit {}: {spin}{grp}", tokens[1], tokens[2]));
            }
            _ => feeds.push(line.clone()),
        }
    }
    for f in &feeds {
        out += f;
        out.push('\n');
    }
    if rows.len() > 1 {
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        for r in &rows {
            let mut l = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c + 1 == r.len() {
                    l += cell;
                } else {
                    l += &format!("{cell:<w$}  ", w = widths[c]);
                }
            }
            out += l.trim_end();
            out.push('\n');
        }
    } else {
        out += "(no symbols)\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(
            check_request("EURUSD", None, None, None).unwrap(),
            "CHECK EURUSD\n"
        );
        assert_eq!(
            check_request("EURUSD", Some(100), Some(5), None).unwrap(),
            "CHECK EURUSD stale_ms=100 source_ms=5\n"
        );
        assert!(check_request("EUR USD", None, None, None).is_err());
        assert!(check_request("EUR\nPING", None, None, None).is_err());
        assert!(check_request("", None, None, None).is_err());
        assert_eq!(
            check_request("AAPL", None, None, Some("iex")).unwrap(),
            "CHECK AAPL feed=iex\n"
        );
        assert!(check_request("AAPL", None, None, Some("a b")).is_err());
    }

    #[test]
    fn exit_codes() {
        assert_eq!(
            exit_code("OK EURUSD seq=1 bid=- ask=- silence_us=0 source_age_us=0"),
            0
        );
        assert_eq!(
            exit_code("REJECT X unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-"),
            1
        );
        assert_eq!(exit_code("ERR unknown option"), 2);
        assert_eq!(exit_code(""), 2);
    }

    #[test]
    fn socket_path_precedence() {
        assert_eq!(
            socket_path(Some(Path::new("/tmp/x.sock"))),
            PathBuf::from("/tmp/x.sock")
        );
    }

    #[test]
    fn status_table() {
        let lines: Vec<String> = [
            "FEED md1 symbols=2 state=live channel_silence_us=12 clock_offset_us=-3 gap_epoch=0 session_epoch=1 recovery=holding line_skew_max_us=85",
            "SYMBOL md1 OK EURUSD seq=7 bid=1.085@5 ask=1.086@5 silence_us=10 source_age_us=20",
            "SYMBOL md1 REJECT GBPUSD stale_quote,suspect seq=3 bid=- ask=1.2@1 silence_us=900000 source_age_us=5 suspect=gap",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let t = format_status(&lines);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(
            rows[0],
            "feed md1: 2 symbols, live, channel silence 12 us, clock offset -3 us, recovery holding, line skew max 85 us"
        );
        assert!(rows[1].starts_with("FEED  SYMBOL  VERDICT  REASONS"));
        let eur: Vec<&str> = rows[2].split_whitespace().collect();
        assert_eq!(
            eur,
            ["md1", "EURUSD", "OK", "-", "7", "1.085@5", "1.086@5", "10", "20", "-"]
        );
        let gbp: Vec<&str> = rows[3].split_whitespace().collect();
        assert_eq!(
            gbp,
            [
                "md1",
                "GBPUSD",
                "REJECT",
                "stale_quote,suspect",
                "3",
                "-",
                "1.2@1",
                "900000",
                "5",
                "gap"
            ]
        );
    }

    #[test]
    fn status_grp_and_units() {
        let lines: Vec<String> = [
            "FEED cboe symbols=0 state=live channel_silence_us=1 clock_offset_us=0 gap_epoch=0 session_epoch=1 recovery=live line_skew_max_us=- waiting=0 kept_entries=0",
            "GRP cboe logged_in=1 count_limit=25 pause=S pause_left_ms=800",
            "UNIT cboe 1 spin=running spin_wait_ms=- grp=on",
            "UNIT cboe 2 spin=wanted:last_failure=silence spin_wait_ms=2000 grp=off",
            "UNIT cboe 3 spin=none spin_wait_ms=- grp=-",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let t = format_status(&lines);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(
            &rows[1..],
            [
                "feed cboe: Gap Request Proxy logged in, count limit 25, paused by S for 800 ms",
                "feed cboe unit 1: spin running",
                "feed cboe unit 2: spin failed (silence), next attempt in 2000 ms, Gap Request Proxy off until the unit's next session (I)",
                "feed cboe unit 3: no spin server",
                "(no symbols)",
            ]
        );
        let down = format_status(&[
            "GRP cboe logged_in=0 count_limit=100 pause=- pause_left_ms=-".to_string(),
        ]);
        assert_eq!(
            down.lines().next().unwrap(),
            "feed cboe: Gap Request Proxy not logged in, count limit 100"
        );
    }
}

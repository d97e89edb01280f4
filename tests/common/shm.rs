//! A rig for the shared-memory tests: feeds whose tables live in a state
//! file published as the daemon publishes it (`daemon::shm::publish`), and
//! the gate socket server answering from the same tables with a clock the
//! test sets, so that socket and shared-memory answers compare byte for
//! byte.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tickgate::client::Client;
use tickgate::daemon::shm::{publish, Published, DEFAULT_MODE};
use tickgate::feed::reader::{feed_table_in, TablePublisher};
use tickgate::feed::shm::FeedSpec;
use tickgate::feed::{Feed, FeedSettings};
use tickgate::gate::server::{serve, Backend, Gate, ServerConfig, ServerHandle};

/// The live `Gate`, answering at the rig's clock.
pub struct AtClock {
    pub gate: Gate,
    pub now: Arc<AtomicI64>,
}

impl Backend for AtClock {
    fn answer(&self, line: &[u8], _now: i64, out: &mut Vec<u8>) {
        self.gate.answer(line, self.now.load(Ordering::SeqCst), out)
    }
}

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub shm: PathBuf,
    pub sock: PathBuf,
    pub feeds: Vec<Feed<TablePublisher>>,
    pub published: Option<Published>,
    pub server: Option<ServerHandle>,
    pub now: Arc<AtomicI64>,
    conn: Option<BufReader<UnixStream>>,
}

/// Publishes a state file at `shm` for these feeds; returns the feeds
/// writing into it and the readers of the same tables.
pub fn publish_feeds(
    shm: &std::path::Path,
    feeds: &[(&str, FeedSettings)],
) -> (Published, Vec<Feed<TablePublisher>>, Gate) {
    let specs: Vec<FeedSpec> = feeds
        .iter()
        .map(|(name, s)| FeedSpec {
            name: name.to_string(),
            capacity: s.max_symbols as u32,
            stale_ms: s.stale_ms,
            source_max_age_ms: s.source_max_age_ms,
            units: s.venue.kind.unit_cells() as u32,
        })
        .collect();
    let (published, regions) = publish(shm, DEFAULT_MODE, &specs).unwrap();
    let mut out = Vec::new();
    let mut readers = Vec::new();
    for ((name, s), r) in feeds.iter().zip(&regions) {
        let (publisher, reader) =
            feed_table_in(r.capacity, &r.cell, &r.table, r.units, &r.units_region).unwrap();
        out.push(Feed::with_publisher(*s, 2, publisher));
        readers.push((name.to_string(), reader));
    }
    (published, out, Gate::new(readers))
}

impl Rig {
    /// Feeds (name, settings), each with 2 lines; the socket is not
    /// started until `socket_answer` needs it.
    pub fn new(feeds: &[(&str, FeedSettings)]) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let shm = dir.path().join("state.shm");
        let sock = dir.path().join("gate.sock");
        let (published, feeds, gate) = publish_feeds(&shm, feeds);
        let now = Arc::new(AtomicI64::new(0));
        let server = serve(
            &ServerConfig {
                path: sock.clone(),
                ..ServerConfig::default()
            },
            AtClock {
                gate,
                now: now.clone(),
            },
        )
        .unwrap();
        Rig {
            dir,
            shm,
            sock,
            feeds,
            published: Some(published),
            server: Some(server),
            now,
            conn: None,
        }
    }

    pub fn client(&self) -> Client {
        Client::open(&self.shm).unwrap()
    }

    /// The socket's answer to `line` at `now`, `\n` included.
    pub fn socket_answer(&mut self, line: &str, now: i64) -> String {
        self.now.store(now, Ordering::SeqCst);
        if self.conn.is_none() {
            self.conn = Some(BufReader::new(UnixStream::connect(&self.sock).unwrap()));
        }
        let conn = self.conn.as_mut().unwrap();
        conn.get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        conn.read_line(&mut answer).unwrap();
        answer
    }
}

/// The shared-memory answer to `line` at `now`.
pub fn shm_answer(client: &mut Client, line: &str, now: i64) -> String {
    let mut out = Vec::new();
    client.answer(line.as_bytes(), now, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

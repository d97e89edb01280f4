//! gate.md "One symbol on several feeds", as properties over simulated
//! feeds (loss, duplicates, reordering, session changes, suspicion, end of
//! session) with overlapping symbol sets:
//! - a symbol that one feed knows is answered byte for byte as before
//!   several feeds were combined: that feed's verdict line, the one the
//!   check gave from a lone feed (`verdict_for` then `write_verdict`),
//!   whatever the other feeds hold;
//! - `feed=<name>` answers each feed's line alone;
//! - a symbol several feeds know is answered with `seq=-` and `feeds=`
//!   naming exactly the feeds that know it, and the socket's answer equals
//!   the shared-memory client's.

use proptest::prelude::*;

use tickgate::feed::check::{verdict_for, write_error, write_verdict, SymbolLookup};
use tickgate::feed::{ClockOffset, FeedSettings, Liveness, Mode};
use tickgate::sim::simulate::{symbol_name, SimConfig, SimMode, Simulator};
use tickgate::wire::Symbol;

#[path = "common/shm.rs"]
mod shm;
use shm::{shm_answer, Rig};

const MS: i64 = 1_000_000;

/// The answer from one feed alone, as the check gave it before feeds were
/// combined (the lone feed's lookup, its verdict, its line).
fn lone_answer(feed: &dyn SymbolLookup, symbol: &str, stale: Option<u64>, now: i64) -> String {
    let mut out = Vec::new();
    let found = Symbol::parse(symbol).and_then(|s| feed.lookup(s));
    match verdict_for(found, stale, None, now) {
        Ok(v) => write_verdict(&mut out, symbol.as_bytes(), &v),
        Err(e) => write_error(&mut out, e),
    }
    String::from_utf8(out).unwrap()
}

#[derive(Debug, Clone)]
struct Case {
    seeds: [u64; 2],
    symbols: [usize; 2],
    loss: f64,
    delta: bool,
    channel_liveness: bool,
    session_change: bool,
    bad_seq: bool,
    end_session: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<[u64; 2]>(),
        (1usize..6, 1usize..6),
        prop_oneof![Just(0.0), 0.0..0.3f64],
        any::<bool>(),
        any::<bool>(),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(seeds, (a, b), loss, delta, channel_liveness, (s, q, e))| Case {
                seeds,
                symbols: [a, b],
                loss,
                delta,
                channel_liveness,
                session_change: s,
                bad_seq: q,
                end_session: e,
            },
        )
}

fn sim(c: &Case, i: usize) -> Simulator {
    let mut cfg = SimConfig::new(c.seeds[i]);
    cfg.symbols = c.symbols[i];
    cfg.rate = 300;
    cfg.duration_ns = 300 * MS;
    cfg.mode = if c.delta {
        SimMode::Delta
    } else {
        SimMode::Full
    };
    cfg.snapshot_ms = if c.delta { 80 } else { 0 };
    cfg.heartbeat_ms = 50;
    cfg.channel_heartbeat_ms = 30;
    for l in &mut cfg.lines {
        l.loss = c.loss;
    }
    cfg.dup = 0.05;
    cfg.reorder = 0.05;
    // Only the first feed changes session, turns suspect or ends: the
    // feeds disagree.
    if i == 0 {
        cfg.session_change_at_ns = c.session_change.then_some(150 * MS);
        cfg.bad_seq_at_ns = c.bad_seq.then_some(90 * MS);
        cfg.end_session = c.end_session;
    }
    Simulator::new(cfg).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn one_feed_symbols_answer_as_before_and_shared_ones_combine(c in case()) {
        let settings = |stale_ms| FeedSettings {
            mode: if c.delta { Mode::Delta } else { Mode::Full },
            liveness: if c.channel_liveness { Liveness::Channel } else { Liveness::Symbol },
            clock_offset: ClockOffset::Off,
            stale_ms,
            source_max_age_ms: 500,
            max_symbols: 64,
            ..FeedSettings::default()
        };
        let mut rig = Rig::new(&[("itch", settings(200)), ("iex", settings(150))]);
        // A symbol the second feed's config names (known, no quote).
        rig.feeds[1].set_symbol_thresholds(Symbol::parse("CFGONLY").unwrap(), 100, 400).unwrap();
        let mut client = rig.client();
        let most = c.symbols[0].max(c.symbols[1]);
        let mut names: Vec<String> = (0..most).map(symbol_name).collect();
        names.push("CFGONLY".into());
        names.push("NOTTHERE".into());
        let mut sims = [sim(&c, 0), sim(&c, 1)];
        let mut next: [Option<(i64, usize, Vec<u8>)>; 2] = [None, None];
        let mut packets = 0;
        loop {
            for (i, s) in sims.iter_mut().enumerate() {
                if next[i].is_none() {
                    let mut buf = Vec::new();
                    next[i] = s.next_into(&mut buf).map(|ev| (ev.t_ns, ev.line, buf));
                }
            }
            let pick = match (&next[0], &next[1]) {
                (None, None) => break,
                (Some(_), None) => 0,
                (None, Some(_)) => 1,
                (Some(a), Some(b)) => usize::from(b.0 < a.0),
            };
            let (t, line, bytes) = next[pick].take().unwrap();
            rig.feeds[pick].on_datagram(line, &bytes, t);
            packets += 1;
            let now = t + (packets % 4) as i64 * 70 * MS;
            for name in &names {
                let knows: Vec<usize> = (0..2)
                    .filter(|&f| Symbol::parse(name).is_some_and(|s| rig.feeds[f].lookup(s).is_some()))
                    .collect();
                for stale in [None, Some(100)] {
                    let line = match stale {
                        None => format!("CHECK {name}"),
                        Some(ms) => format!("CHECK {name} stale_ms={ms}"),
                    };
                    let socket = rig.socket_answer(&line, now);
                    let mapped = shm_answer(&mut client, &line, now);
                    prop_assert_eq!(&socket, &mapped, "`{}` at {}", line, now);
                    match knows.as_slice() {
                        [] => prop_assert_eq!(&socket, &lone_answer(&rig.feeds[0], name, stale, now)),
                        [f] => {
                            let lone = lone_answer(&rig.feeds[*f], name, stale, now);
                            prop_assert_eq!(&socket, &lone, "`{}` known to feed {} only", line, f);
                            prop_assert!(!socket.contains(" feeds="));
                        }
                        _ => {
                            if !socket.starts_with("ERR ") {
                                prop_assert!(socket.contains(" seq=- "), "{}", socket);
                                let feeds = socket.trim_end().rsplit(" feeds=").next().unwrap();
                                let shown: Vec<&str> =
                                    feeds.split(',').map(|i| i.split(':').next().unwrap()).collect();
                                prop_assert_eq!(shown, vec!["itch", "iex"]);
                            }
                        }
                    }
                    // feed=: each feed's line alone.
                    for (f, feed) in ["itch", "iex"].iter().enumerate() {
                        let picked = rig.socket_answer(&format!("{line} feed={feed}"), now);
                        prop_assert_eq!(&picked, &lone_answer(&rig.feeds[f], name, stale, now));
                    }
                }
            }
        }
        prop_assert!(packets > 10);
    }
}

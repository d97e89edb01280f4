//! Property tests of a `cme-mdp3` feed (venues.md `cme-mdp3`, Channel
//! rules and Entries) on CME's real v6 channel: what one line loses the
//! other line delivers, so every instrument ends exactly as with nothing
//! lost; a packet lost on both lines is counted once, and only instruments
//! with entries after it can be verified again; duplicates and arbitrary
//! damage never change an instrument's state or panic.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use proptest::prelude::*;
use tickgate::capture::CaptureReader;
use tickgate::feed::{Feed, FeedSettings, VenueKind};

/// The v6 channel's packets of line A in sequence order, with their
/// capture times.
fn line_a() -> &'static [(i64, Vec<u8>)] {
    static P: OnceLock<Vec<(i64, Vec<u8>)>> = OnceLock::new();
    P.get_or_init(|| {
        let path = format!(
            "{}/fixtures/real/cme-mdp3-v6-incremental-ab.pcapng",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut r = CaptureReader::open(path).unwrap();
        let mut out = Vec::new();
        while let Some(d) = r.next_ref() {
            let d = d.unwrap();
            if d.dst.to_string() == "224.0.31.64:14340" {
                out.push((d.ts_ns, d.payload.to_vec()));
            }
        }
        out.sort_by_key(|(_, p)| u32::from_le_bytes(p[..4].try_into().unwrap()));
        // A packet every 10 µs from the first one's time (the capture's
        // stamps are neither in sequence order nor close enough for the
        // other line to fill a hole within `gap_hold_us`).
        let t0 = out[0].0;
        for (i, (ts, _)) in out.iter_mut().enumerate() {
            *ts = t0 + i as i64 * 10_000;
        }
        out
    })
}

/// What the checks answer from: per symbol, its sequence, quote and cause.
type State = BTreeMap<String, (Option<u64>, bool, String, String, Option<String>)>;

fn state(feed: &Feed) -> State {
    feed.symbols()
        .map(|(sym, s)| {
            (
                sym.to_string(),
                (
                    s.shown_seq,
                    s.has_quote,
                    format!("{:?}", s.bid),
                    format!("{:?}", s.ask),
                    s.suspect.map(|c| c.as_str().to_string()),
                ),
            )
        })
        .collect()
}

fn feed() -> Feed {
    Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 2)
}

/// Line B runs this many packets (30 µs) behind line A: a hole on A is
/// filled by B within `gap_hold_us` (1000 by default).
const LAG: usize = 3;

/// The channel on both lines except the packets that `lost_a` and `lost_b`
/// name on each.
fn run(lost_a: &[bool], lost_b: &[bool]) -> Feed {
    let mut f = feed();
    let pkts = line_a();
    for i in 0..pkts.len() + LAG {
        if let (Some((t, p)), Some(false)) = (pkts.get(i), lost_a.get(i)) {
            f.on_datagram(0, p, *t);
        }
        if let Some(j) = i.checked_sub(LAG) {
            if !lost_b[j] {
                let now = pkts.get(i).map_or(pkts[j].0 + 30_000, |(t, _)| *t + 1);
                f.on_datagram(1, &pkts[j].1, now);
            }
        }
    }
    // R2: a hole still open at the end is declared when its time passes.
    f.handle_timeout(pkts[pkts.len() - 1].0 + 1_000_000_000);
    f
}

fn baseline() -> &'static State {
    static S: OnceLock<State> = OnceLock::new();
    S.get_or_init(|| {
        let n = line_a().len();
        state(&run(&vec![false; n], &vec![false; n]))
    })
}

/// Packet indices chosen by `picks` (each taken modulo the packet count).
fn mask(picks: &[usize]) -> Vec<bool> {
    let n = line_a().len();
    let mut m = vec![false; n];
    for &p in picks {
        m[p % n] = true;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Losses on one line at a time: the other line's copy fills in, and
    /// every instrument ends as with nothing lost.
    #[test]
    fn one_lines_losses_change_nothing(
        a in proptest::collection::vec(any::<usize>(), 0..200),
        b in proptest::collection::vec(any::<usize>(), 0..200),
    ) {
        let lost_a = mask(&a);
        // B loses only what A delivered.
        let lost_b: Vec<bool> = mask(&b).iter().zip(&lost_a).map(|(b, a)| *b && !*a).collect();
        let f = run(&lost_a, &lost_b);
        prop_assert_eq!(f.counters().channel_messages_lost, 0);
        prop_assert_eq!(&state(&f), baseline());
    }

    /// A packet lost on both lines is counted once; every instrument stays
    /// suspect or unverified until an entry of its own proves it (S7), so
    /// no instrument answers better than with nothing lost.
    #[test]
    fn both_lines_losses_are_counted_and_never_trusted_more(
        picks in proptest::collection::vec(any::<usize>(), 1..20),
    ) {
        // Neither the channel's first packet (the feed would start at the
        // next one, with nothing missing) nor its last (no later one would
        // reveal it).
        let n = line_a().len();
        let lost = mask(&picks.iter().map(|p| 1 + p % (n - 2)).collect::<Vec<_>>());
        let n_lost = lost.iter().filter(|&&l| l).count() as u64;
        let f = run(&lost, &lost);
        prop_assert_eq!(f.counters().channel_messages_lost, n_lost);
        // The v6 capture joined late: every instrument waits for a
        // snapshot whatever is lost.
        for (sym, s) in state(&f) {
            prop_assert!(s.4.is_some(), "{} answers without a cause", sym);
        }
    }

    /// Damaged copies on line B (bytes flipped or cut) are invalid or
    /// duplicates of what A delivered: nothing changes, nothing panics.
    #[test]
    fn damaged_copies_change_nothing(
        hits in proptest::collection::vec((any::<usize>(), any::<usize>(), any::<u8>()), 1..50),
    ) {
        let mut f = feed();
        let pkts = line_a();
        let mut damaged: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
        for (i, at, x) in hits {
            let i = i % pkts.len();
            let mut p = damaged.remove(&i).unwrap_or_else(|| pkts[i].1.clone());
            let at = at % p.len();
            if x == 0 {
                p.truncate(at);
            } else if at >= 12 {
                // The packet header stays (a copy of a delivered packet);
                // the messages are damaged.
                p[at] ^= x;
            }
            damaged.insert(i, p);
        }
        for (i, (t, p)) in pkts.iter().enumerate() {
            f.on_datagram(0, p, *t);
            if let Some(d) = damaged.get(&i) {
                f.on_datagram(1, d, *t + 20_000);
            }
        }
        prop_assert_eq!(f.counters().channel_messages_lost, 0);
        prop_assert_eq!(&state(&f), baseline());
    }
}

//! Properties of the sans-I/O core (proptest):
//! - a tick's loss is never counted twice, whatever the duplication and
//!   delay of copies of Quotes and Heartbeats;
//! - a delta symbol suspect for any cause other than `channel_gap` recovers
//!   only through a Snapshot;
//! - arbitrary datagrams never panic, and an invalid one changes no state;
//! - every packet on both lines A and B gives the same symbol state as line
//!   A alone, the second copies counted as duplicates;
//! - request framing does not depend on how the byte stream is chunked.

use proptest::prelude::*;
use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, Mode, SuspectCause, SymbolSummary};
use tickgate::wire::{
    Heartbeat, Packet, PacketBuilder, PacketKind, Quote, SessionId, Side, Symbol, FLAG_RESET,
};

const T0: i64 = 1_796_025_600_000_000_000;
const MS: i64 = 1_000_000;

fn sym(i: u8) -> Symbol {
    Symbol::parse(["EURUSD", "GBPUSD", "USDJPY"][i as usize % 3]).unwrap()
}

fn session(i: u8) -> SessionId {
    SessionId::parse(&format!("2026120{}A1", i % 10)).unwrap()
}

fn quote(s: Symbol, seq: u64, t: i64, flags: u8) -> Quote {
    let mut q = Quote::new(
        s,
        seq,
        t as u64,
        Some(Side {
            px: 1_000_000_000 + seq as i64,
            qty: 1,
        }),
        Some(Side {
            px: 1_000_100_000 + seq as i64,
            qty: 2,
        }),
    );
    q.flags = flags;
    q
}

fn hb(s: Symbol, next_seq: u64, t: i64) -> Heartbeat {
    Heartbeat {
        flags: 0,
        symbol: s,
        next_seq,
        source_ts: t as u64,
    }
}

/// Everything observable about a feed except the invalid-packet counters.
fn observable<P: tickgate::feed::Publish>(
    f: &Feed<P>,
) -> (
    tickgate::feed::FeedCounters,
    Vec<(Symbol, SymbolSummary)>,
    tickgate::feed::FeedView,
    Vec<SessionId>,
) {
    let mut c = f.counters().clone();
    c.invalid_packets = 0;
    for l in &mut c.lines {
        l.invalid_packets = 0;
    }
    (
        c,
        f.symbols().collect(),
        *f.feed_view(),
        f.sessions().to_vec(),
    )
}

// ---------------------------------------------------------------- loss once

/// One delivery of the provider's stream for one symbol: the provider sends
/// Quotes 1..=n in order with a Heartbeat (next_seq = k + 1) after some of
/// them; each message is lost or delivered, and a delivered one may be
/// delivered again later (a repeat or delayed copy).
#[derive(Clone, Debug)]
enum Sent {
    Quote(u64),
    Heartbeat(u64),
}

fn loss_stream() -> impl Strategy<Value = (Vec<Sent>, Vec<bool>, Vec<(usize, usize)>)> {
    (1u64..60, prop::collection::vec(any::<bool>(), 60)).prop_flat_map(|(n, hbs)| {
        let mut sent = Vec::new();
        for k in 1..=n {
            sent.push(Sent::Quote(k));
            if hbs[k as usize % hbs.len()] {
                sent.push(Sent::Heartbeat(k + 1));
            }
        }
        let len = sent.len();
        (
            Just(sent),
            prop::collection::vec(prop::bool::weighted(0.7), len),
            // (message to copy, how many deliveries later the copy arrives)
            prop::collection::vec((0..len, 0..len + 1), 0..20),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_lost_tick_is_counted_once((sent, delivered, copies) in loss_stream(), delta in any::<bool>()) {
        let s = sym(0);
        // The order of deliveries: originals in send order, copies inserted
        // after their original.
        let mut order: Vec<usize> = (0..sent.len()).filter(|&i| delivered[i]).collect();
        for &(i, later) in &copies {
            if let Some(pos) = order.iter().position(|&x| x == i) {
                let at = (pos + 1 + later).min(order.len());
                order.insert(at, i);
            }
        }
        let settings = FeedSettings {
            mode: if delta { Mode::Delta } else { Mode::Full },
            ..FeedSettings::default()
        };
        let mut feed = Feed::new(settings, 2);
        let mut b = PacketBuilder::new();
        let mut first: Option<u64> = None; // baseline: last_seq after the first message
        let mut highest = 0u64;
        let mut quotes_seen = std::collections::BTreeSet::new();
        for (step, &i) in order.iter().enumerate() {
            let t = T0 + step as i64 * MS;
            // A fresh channel sequence per delivery: repeats reach the symbol
            // rules instead of being dropped by C2.
            b.start(session(1), step as u64 + 1);
            match sent[i] {
                Sent::Quote(k) => {
                    b.quote(&quote(s, k, t, 3));
                    first.get_or_insert(k - 1);
                    highest = highest.max(k);
                    quotes_seen.insert(k);
                }
                Sent::Heartbeat(next) => {
                    b.heartbeat(&hb(s, next, t));
                    first.get_or_insert(next - 1);
                    highest = highest.max(next - 1);
                }
            }
            prop_assert_eq!(feed.on_datagram(step % 2, b.bytes(), t), DatagramOutcome::Applied);
        }
        let Some(base) = first else { return Ok(()) };
        let never_delivered = (base + 1..=highest).filter(|k| !quotes_seen.contains(k)).count() as u64;
        let summary = feed.symbol_summary(s).unwrap();
        prop_assert_eq!(summary.ticks_lost, never_delivered);
        prop_assert_eq!(feed.counters().ticks_lost, never_delivered);
        prop_assert_eq!(summary.shown_seq, Some(highest));
    }
}

// ------------------------------------------------------ delta needs snapshot

#[derive(Clone, Debug)]
enum Op {
    /// Quote with seq = last sent + delta (may be <= 0 -> old, huge -> S5).
    Quote {
        delta: i64,
        flags: u8,
    },
    Heartbeat {
        delta: i64,
    },
    Snapshot {
        delta: i64,
        reset: bool,
    },
    /// Skip `n` channel sequence numbers before the next packet (C3).
    ChannelGap(u8),
    /// A new session (C5).
    NewSession,
}

fn op() -> impl Strategy<Value = Op> {
    let delta = prop_oneof![
        6 => Just(1i64),
        2 => -2i64..4,
        1 => Just(2_000_000i64),
        1 => Just(-2_000_000i64),
    ];
    prop_oneof![
        6 => (delta.clone(), 0u8..4).prop_map(|(delta, flags)| Op::Quote { delta, flags }),
        2 => delta.clone().prop_map(|delta| Op::Heartbeat { delta }),
        2 => (delta, any::<bool>()).prop_map(|(delta, reset)| Op::Snapshot { delta, reset }),
        1 => (1u8..4).prop_map(Op::ChannelGap),
        1 => Just(Op::NewSession),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn delta_symbol_recovers_only_by_snapshot(ops in prop::collection::vec(op(), 1..80)) {
        let s = sym(0);
        let mut feed = Feed::new(FeedSettings { mode: Mode::Delta, ..FeedSettings::default() }, 2);
        let mut b = PacketBuilder::new();
        let mut sess = 1u8;
        let mut chan = 1u64;
        let mut seq: i64 = 1; // the provider's idea of the symbol's last seq
        for (step, op) in ops.iter().enumerate() {
            let t = T0 + step as i64 * MS;
            let before = feed.symbol_summary(s);
            let snapshots_before = feed.counters().snapshots_applied;
            match *op {
                Op::ChannelGap(n) => { chan += n as u64; continue; }
                Op::NewSession => { sess += 1; chan = 1; seq = 0; continue; }
                Op::Quote { delta, flags } => {
                    let q = (seq + delta).max(1);
                    seq = seq.max(q);
                    b.start(session(sess), chan).quote(&quote(s, q as u64, t, flags));
                }
                Op::Heartbeat { delta } => {
                    let n = (seq + delta).max(1);
                    b.start(session(sess), chan).heartbeat(&hb(s, n as u64, t));
                }
                Op::Snapshot { delta, reset } => {
                    let q = (seq + delta).max(0);
                    let mut snap = quote(s, q as u64, t, 3);
                    if reset { snap.flags |= FLAG_RESET; }
                    b.start(session(sess), chan).snapshot(&snap);
                }
            }
            chan += 1;
            feed.on_datagram(0, b.bytes(), t);
            let after = feed.symbol_summary(s).unwrap();
            let own = |x: Option<SuspectCause>| matches!(x, Some(c) if c != SuspectCause::ChannelGap);
            if let Some(before) = before {
                if before.has_quote && own(before.suspect) && !own(after.suspect) {
                    prop_assert_eq!(
                        feed.counters().snapshots_applied, snapshots_before + 1,
                        "recovered from {:?} without a snapshot at step {}: {:?}", before.suspect, step, op
                    );
                }
            }
            // A delta symbol with a quote that was never snapshotted is suspect.
            if after.has_quote && after.snapshots_applied == 0 {
                prop_assert!(own(after.suspect), "{:?}", after);
            }
        }
    }
}

// ------------------------------------------------------------ any datagram

/// Sequence numbers: mostly small, sometimes anywhere in u64 (forged or
/// corrupt values must not overflow anything).
fn seq_value() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..30, 1 => any::<u64>(), 1 => (u64::MAX - 30)..=u64::MAX]
}

fn valid_packet() -> impl Strategy<Value = Vec<u8>> {
    let msg = prop_oneof![
        (0u8..3, seq_value(), 0u8..8, any::<u64>()).prop_map(|(s, q, f, ts)| {
            let mut m = quote(sym(s), q, T0, f);
            if ts % 4 == 0 {
                m.source_ts = ts;
            }
            m.encode(b'Q').to_vec()
        }),
        (0u8..3, seq_value(), 0u8..8)
            .prop_map(|(s, q, f)| quote(sym(s), q, T0, f).encode(b'S').to_vec()),
        (0u8..3, seq_value()).prop_map(|(s, n)| hb(sym(s), n, T0).encode().to_vec()),
        prop::collection::vec(any::<u8>(), 1..10),
    ];
    (
        0u8..3,
        seq_value(),
        prop::collection::vec(msg, 0..5),
        0u8..10,
    )
        .prop_map(|(sess, seq, msgs, kind)| {
            if kind == 0 {
                return PacketBuilder::end_of_session(session(sess), seq).to_vec();
            }
            let mut b = PacketBuilder::new();
            b.start(session(sess), seq);
            for m in &msgs {
                b.push_raw(m);
            }
            b.bytes().to_vec()
        })
}

fn datagram() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..120),
        (valid_packet(), any::<prop::sample::Index>())
            .prop_map(|(p, i)| p[..i.index(p.len() + 1)].to_vec()),
        (valid_packet(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|(mut p, i, x)| {
            let i = i.index(p.len());
            p[i] ^= x | 1;
            p
        }),
        (valid_packet(), prop::collection::vec(any::<u8>(), 1..4)).prop_map(|(mut p, extra)| {
            p.extend_from_slice(&extra);
            p
        }),
        valid_packet(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_datagram_is_safe_and_an_invalid_one_changes_nothing(
        warmup in prop::collection::vec(valid_packet(), 0..6),
        datagrams in prop::collection::vec((datagram(), 0usize..3, prop_oneof![-5i64..5, any::<i64>()]), 1..30),
        mode in prop_oneof![Just(Mode::Full), Just(Mode::Delta)],
        max_seq_jump in prop_oneof![Just(1_000_000u64), Just(u64::MAX), Just(0), 1u64..5],
    ) {
        let mut feed = Feed::new(FeedSettings { mode, max_symbols: 2, max_seq_jump, ..FeedSettings::default() }, 2);
        for (i, p) in warmup.iter().enumerate() {
            feed.on_datagram(i % 2, p, T0 + i as i64);
        }
        for (i, (d, line, dt)) in datagrams.iter().enumerate() {
            let now = (T0 + (i as i64 + 10) * MS).saturating_add(*dt);
            let before = observable(&feed);
            let invalid_before = feed.counters().invalid_packets;
            let out = feed.on_datagram(*line, d, now);
            match Packet::parse(d) {
                Err(e) if *line < 2 => {
                    prop_assert_eq!(out, DatagramOutcome::Invalid(e.into()));
                    prop_assert_eq!(feed.counters().invalid_packets, invalid_before + 1);
                    prop_assert_eq!(observable(&feed), before);
                }
                _ if *line >= 2 => {
                    prop_assert_eq!(out, DatagramOutcome::UnknownLine);
                    prop_assert_eq!(observable(&feed), before);
                }
                _ => prop_assert!(!matches!(out, DatagramOutcome::Invalid(_))),
            }
            // The check never panics either.
            for s in 0..3 {
                let mut out = Vec::new();
                let feeds: [&dyn tickgate::feed::check::SymbolLookup; 1] = [&feed];
                tickgate::gate::protocol::answer(format!("CHECK {}", sym(s)).as_bytes(), &feeds, now, &mut out);
                prop_assert!(out.ends_with(b"\n"));
            }
        }
    }
}

// ------------------------------------------------------------------ A and B

/// A provider stream: packets with channel gaps, a session change and an
/// end of session now and then, messages for three symbols.
fn stream() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let item = (
        0u8..20,                                                  // event kind
        prop::collection::vec((0u8..3, 0u8..10, -1i64..3), 0..4), // (symbol, kind, seq step)
    );
    prop::collection::vec(item, 1..60).prop_map(|items| {
        let mut out = Vec::new();
        let mut sess = 1u8;
        let mut chan = 1u64;
        let mut seqs = [0i64; 3];
        let mut b = PacketBuilder::new();
        for (i, (kind, msgs)) in items.into_iter().enumerate() {
            let t = T0 + i as i64 * MS;
            match kind {
                0 => chan += 2, // the packet before this one is lost
                1 => {
                    out.push(PacketBuilder::channel_heartbeat(session(sess), chan).to_vec());
                    continue;
                }
                2 if i % 5 == 0 => {
                    out.push(PacketBuilder::end_of_session(session(sess), chan).to_vec());
                    sess += 1;
                    chan = 1;
                    seqs = [0; 3];
                    continue;
                }
                3 => {
                    sess += 1;
                    chan = 1;
                    seqs = [0; 3];
                }
                _ => {}
            }
            if msgs.is_empty() {
                continue;
            }
            b.start(session(sess), chan);
            for (s, k, step) in &msgs {
                let seq = &mut seqs[*s as usize];
                *seq = (*seq + step).max(1);
                match k {
                    0..=5 => b.quote(&quote(sym(*s), *seq as u64, t, k % 4)),
                    6 | 7 => b.heartbeat(&hb(sym(*s), *seq as u64 + 1, t)),
                    _ => b.snapshot(&quote(sym(*s), *seq as u64, t, 3)),
                };
            }
            chan += msgs.len() as u64;
            out.push(b.bytes().to_vec());
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn lines_a_and_b_give_the_state_of_a_alone(
        packets in stream(),
        b_first in prop::collection::vec(any::<bool>(), 60),
        mode in prop_oneof![Just(Mode::Full), Just(Mode::Delta)],
    ) {
        let settings = FeedSettings { mode, ..FeedSettings::default() };
        let mut a = Feed::new(settings, 2);
        let mut ab = Feed::new(settings, 2);
        for (i, p) in packets.iter().enumerate() {
            let t = T0 + i as i64 * MS;
            a.on_datagram(0, p, t);
            let lines = if b_first[i % b_first.len()] { [1, 0] } else { [0, 1] };
            let first = ab.on_datagram(lines[0], p, t);
            let second = ab.on_datagram(lines[1], p, t);
            let kind = Packet::parse(p).unwrap().kind();
            match (first, kind) {
                (DatagramOutcome::Applied, PacketKind::Data | PacketKind::EndOfSession) => {
                    prop_assert_eq!(second, DatagramOutcome::Duplicate)
                }
                (DatagramOutcome::StaleSession, _) => {
                    prop_assert_eq!(second, DatagramOutcome::StaleSession)
                }
                _ => {}
            }
        }
        prop_assert_eq!(a.symbols().collect::<Vec<_>>(), ab.symbols().collect::<Vec<_>>());
        let (va, vab) = (a.feed_view(), ab.feed_view());
        prop_assert_eq!(
            (va.gap_epoch, va.session_epoch, va.flags, va.offset_ns),
            (vab.gap_epoch, vab.session_epoch, vab.flags, vab.offset_ns)
        );
        let (ca, cab) = (a.counters(), ab.counters());
        prop_assert_eq!(cab.packets(), 2 * ca.packets());
        prop_assert_eq!(cab.ticks_lost, ca.ticks_lost);
        prop_assert_eq!(cab.channel_messages_lost, ca.channel_messages_lost);
        prop_assert_eq!(cab.stale_dropped, ca.stale_dropped);
        prop_assert_eq!(cab.snapshots_applied, ca.snapshots_applied);
        prop_assert!(cab.duplicate_packets() >= ca.duplicate_packets());
        prop_assert_eq!(a.sessions(), ab.sessions());
    }
}

// ------------------------------------------------------------ line framing

use tickgate::feed::check::MAX_LINE;
use tickgate::gate::protocol::{Frame, LineFramer};

/// What the framer must yield for a whole stream, by the contract's words:
/// lines end with `\n`, one `\r` before it is dropped, a line over
/// `MAX_LINE` bytes is one `TooLong`. An unterminated tail is no request,
/// except that one already longer than `MAX_LINE + 1` bytes (too long even
/// if a `\r\n` came next) is reported `TooLong` at once.
fn expected_frames(stream: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut parts: Vec<&[u8]> = stream.split(|&c| c == b'\n').collect();
    let tail = parts.pop().unwrap_or_default(); // "" after a final newline
    for p in parts {
        let p = p.strip_suffix(b"\r").unwrap_or(p);
        out.push((p.len() <= MAX_LINE).then(|| p.to_vec()));
    }
    if tail.len() > MAX_LINE + 1 {
        out.push(None);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn framing_does_not_depend_on_chunking(
        lines in prop::collection::vec(
            (prop_oneof![0usize..20, 1020usize..1030, 2000usize..3000], any::<bool>(), any::<u8>()),
            0..12,
        ),
        tail in 0usize..1500,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let mut stream = Vec::new();
        for (len, cr, fill) in &lines {
            // Printable filler with an occasional lone `\r` inside.
            stream.extend((0..*len).map(|i| if i % 97 == 5 { b'\r' } else { b'A' + (fill.wrapping_add(i as u8) % 26) }));
            if *cr {
                stream.push(b'\r');
            }
            stream.push(b'\n');
        }
        stream.extend(std::iter::repeat_n(b'Z', tail));
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        cuts.sort_unstable();
        let mut framer = LineFramer::new();
        let mut got = Vec::new();
        let mut start = 0;
        for end in cuts.into_iter().chain([stream.len()]) {
            framer.push(&stream[start..end], |f| got.push(match f {
                Frame::Line(l) => Some(l.to_vec()),
                Frame::TooLong => None,
            }));
            start = end;
            prop_assert!(framer.pending() <= MAX_LINE + 1);
        }
        prop_assert_eq!(got, expected_frames(&stream));
    }
}

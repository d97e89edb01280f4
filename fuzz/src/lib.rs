//! The bodies of the fuzz targets: each takes arbitrary bytes and must
//! neither panic nor hang, whatever they are. The libFuzzer targets
//! (`fuzz_targets/`) and the stable replay runner (`src/bin/replay.rs`)
//! call the same functions.

use tickgate::feed::check::parse_request;
use tickgate::feed::{Feed, FeedSettings};
use tickgate::gate::protocol::answer;
use tickgate::wire::Packet;

/// The wire decoder and the feed: the input is cut into datagrams (a
/// two-byte length before each), each decoded (`Packet::parse`, every
/// block) and given to a feed on line `len % 2`, time moving on.
pub fn wire_feed(data: &[u8]) {
    let mut feed = Feed::new(
        FeedSettings {
            max_symbols: 64,
            ..FeedSettings::default()
        },
        2,
    );
    let mut now = 1_796_025_600_000_000_000i64;
    let mut rest = data;
    while rest.len() >= 2 {
        let n = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        let dgram = &rest[2..2 + n];
        rest = &rest[2 + n..];
        if let Ok(p) = Packet::parse(dgram) {
            for b in p.blocks() {
                let _ = b;
            }
        }
        feed.on_datagram(n % 2, dgram, now);
        now += 1_000_000 * (1 + (n as i64 % 700));
    }
    // The whole input as one datagram too.
    let _ = Packet::parse(data);
    feed.on_datagram(0, data, now);
}

/// The gate's request parser and answer, one line at a time (lines cut at
/// `\n`, as the server frames them).
pub fn gate_request(data: &[u8]) {
    let mut out = Vec::with_capacity(512);
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > tickgate::feed::check::MAX_LINE {
            continue;
        }
        let _ = parse_request(line);
        out.clear();
        answer(line, &[], 1_796_025_600_000_000_000, &mut out);
        assert!(out.ends_with(b"\n"), "an answer is one whole line");
    }
}

/// The pcap/pcapng readers over the bytes as a file.
pub fn capture_reader(data: &[u8]) {
    let Ok(r) = tickgate::capture::pcap::CaptureReader::new(std::io::Cursor::new(data)) else {
        return;
    };
    for d in r.take(100_000) {
        if d.is_err() {
            break;
        }
    }
}

/// The Nasdaq BinaryFILE reader over the bytes as a file, read twice:
/// through a buffer of `1 + first byte % 64` bytes (messages straddle it:
/// the slow path) and whole (the fast path). Both must hand out the same
/// datagrams and the same error; every datagram is valid MoldUDP64 whose
/// count and sequence follow the messages read, within one datagram of
/// size unless one message alone is larger.
pub fn binaryfile_reader(data: &[u8]) {
    use tickgate::capture::binaryfile::BinaryFileReader;
    use tickgate::capture::frame::MAX_DATAGRAM;
    use tickgate::capture::source::DatagramSource;
    use tickgate::venue::nasdaq_itch::messages::message_size;
    let date = jiff::civil::Date::new(2019, 1, 30).expect("a date");
    let cap = 1 + data.first().map_or(0, |b| (b % 64) as usize);
    let read = |r: &mut dyn DatagramSource| {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for _ in 0..100_000 {
            match r.next(&mut buf) {
                Ok(Some(m)) => {
                    assert_eq!(m.len, buf.len());
                    out.push((m, buf.clone()));
                }
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
        (out, None)
    };
    let mut small = BinaryFileReader::new(
        std::io::BufReader::with_capacity(cap, std::io::Cursor::new(data)),
        date,
    );
    let mut whole = BinaryFileReader::new(std::io::Cursor::new(data), date);
    let (a, ea) = read(&mut small);
    let (b, eb) = read(&mut whole);
    assert_eq!(a, b, "the same datagrams whatever the buffer");
    assert_eq!(ea, eb, "the same error whatever the buffer");
    let mut next = 1u64;
    for (_, d) in &a {
        let p = Packet::parse_with(d, |k| message_size(k).unwrap_or(1)).expect("valid MoldUDP64");
        assert_eq!(p.sequence, next);
        let n = p.blocks().count();
        assert_eq!(n, p.message_count() as usize);
        assert!(d.len() <= MAX_DATAGRAM || n == 1, "{} bytes", d.len());
        next += n as u64;
    }
    assert_eq!(small.stats().messages + 1, next);
}

/// The fills event parser (one event per JSON line) and the HTTP batch
/// body (`{"events":[...]}`, hashed as K3 does).
pub fn fills_events(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        for line in text.lines() {
            let _ = tickgate::fills::model::parse_line(line);
        }
    }
    if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = tickgate::fills::hash::value_hash(&doc);
        if let Some(events) = doc.get("events").and_then(|e| e.as_array()) {
            for e in events {
                let _ = tickgate::fills::model::parse_value(e);
            }
        }
    }
}

/// Pins glibc's mmap threshold at its default (128 KiB), once per process.
///
/// A feed's large tables are zeroed allocations, which cost nothing until
/// touched when they are fresh mappings. glibc raises its threshold to the
/// size of any mapped block freed (up to 32 MiB), so in a process that
/// builds and drops a feed per input the next same-size table comes from
/// the heap instead and `calloc` clears it with a memset (measured: two
/// thirds of `nasdaq_itch_feed`'s time went to clearing the adapter's
/// per-locate table, which has since moved to a mapping of its own).
/// Setting the threshold explicitly turns that adjustment off for the
/// tables still allocated. A daemon builds its feeds once, so only the
/// harness needs this.
fn fixed_mmap_threshold() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: mallopt is thread-safe and only changes allocator
        // parameters; no memory is touched.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    });
}

/// The targets by name.
/// A venue adapter and the feed (venues.md): the input cut into datagrams
/// as for `wire_feed`, each given to a feed of that venue on line
/// `len % 2`; an invalid datagram must change nothing (no counter but the
/// invalid ones, no symbol, no book: the live order count).
pub fn venue_feed(venue: tickgate::feed::VenueKind, data: &[u8]) {
    fixed_mmap_threshold();
    let mut feed = Feed::new(
        FeedSettings {
            max_symbols: 64,
            venue: tickgate::feed::VenueSettings {
                kind: venue,
                max_orders: 64,
                recovery_entries: 64,
                replay_tables: false,
            },
            ..FeedSettings::for_venue(venue)
        },
        2,
    );
    let mut now = 1_784_122_200_000_000_000i64;
    let mut rest = data;
    while rest.len() >= 2 {
        let n = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        let dgram = &rest[2..2 + n];
        rest = &rest[2 + n..];
        let before = (
            feed.symbol_count(),
            feed.counters().live_orders,
            feed.counters().unknown_messages,
            *feed.feed_view(),
        );
        let out = feed.on_datagram(n % 2, dgram, now);
        if let tickgate::feed::DatagramOutcome::Invalid(_) = out {
            let after = (
                feed.symbol_count(),
                feed.counters().live_orders,
                feed.counters().unknown_messages,
                *feed.feed_view(),
            );
            assert_eq!(before, after, "an invalid datagram changed the feed");
        }
        now += 1_000_000 * (1 + (n as i64 % 700));
    }
}

pub fn iex_tops_feed(data: &[u8]) {
    venue_feed(tickgate::feed::VenueKind::IexTops, data)
}

pub fn nasdaq_itch_feed(data: &[u8]) {
    venue_feed(tickgate::feed::VenueKind::NasdaqItch, data)
}

/// The CME MDP 3.0 SBE decoder (venues.md `cme-mdp3`): the input cut into
/// datagrams as for `wire_feed`, and the whole input as one. Each is
/// validated (`messages::validate`) and then walked message by message:
/// every framed message through the generated decoder (every field of a
/// known template read) and through `messages::decode` (every entry of its
/// groups read). A valid datagram's walk agrees with the summary (messages,
/// unknown ones, heartbeat only); an invalid one's walk fails with the
/// same error.
pub fn cme_sbe(data: &[u8]) {
    let mut rest = data;
    while rest.len() >= 2 {
        let n = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        cme_datagram(&rest[2..2 + n]);
        rest = &rest[2 + n..];
    }
    cme_datagram(data);
}

fn cme_datagram(d: &[u8]) {
    use tickgate::venue::cme_mdp3::messages::{self, Body, Item};
    use tickgate::venue::cme_mdp3::{sbe, templates};
    let walk = || -> Result<(u32, u32, bool), sbe::SbeError> {
        let (_, msgs) = sbe::packet(d)?;
        let (mut n, mut unknown, mut heartbeat_only) = (0, 0, true);
        let mut end = sbe::PACKET_HEADER_LEN;
        for raw in msgs {
            let raw = raw?;
            assert_eq!(raw.offset, end, "messages are contiguous");
            end = raw.offset + sbe::MIN_MSG_SIZE + raw.body.len();
            n += 1;
            if let Some(Ok(m)) = templates::decode(&raw) {
                let _ = m.fields_present();
            }
            match messages::decode(&raw)? {
                Item::Unknown { .. } => unknown += 1,
                Item::Known { header, body } => {
                    if header.template_id != messages::ADMIN_HEARTBEAT {
                        heartbeat_only = false;
                    }
                    match body {
                        Body::Incremental { entries, .. } => {
                            let count = entries.count();
                            assert_eq!(entries.count(), count);
                            assert_eq!(entries.map(|e| e.book.is_some()).count(), count);
                        }
                        Body::Snapshot(s) => {
                            let count = s.entries.count();
                            assert_eq!(s.entries.count(), count);
                            for e in s.entries {
                                let _ = e.price.and_then(|p| p.to_nanos());
                            }
                        }
                        Body::Definition(def) => {
                            let _ = messages::trim(def.symbol);
                        }
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(end, d.len(), "messages cover the packet");
        Ok((n, unknown, heartbeat_only))
    };
    match (messages::validate(d), walk()) {
        (Ok(s), Ok(w)) => {
            assert!(s.messages >= 1);
            assert_eq!((s.messages, s.unknown, s.heartbeat_only), w);
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("validate and the walk disagree: {a:?} {b:?}"),
    }
    // Each message validation gives, its step gives again (the adapter's
    // plan: a packet decoded once).
    let _ = messages::validate_with(d, |item| {
        let again = messages::Step::of(d, item).item(d);
        assert_eq!(format!("{again:?}"), format!("{:?}", Some(*item)));
    });
}

/// SoupBinTCP and GLIMPSE (recovery.md R5) as a client receives them: the
/// input is a TCP stream, cut into reads at places taken from its first
/// byte; every packet the decoder yields must encode back to the bytes it
/// came from, Sequenced Data goes through the GLIMPSE decoder, and the
/// decoder never buffers more than one bounded packet beyond a read.
pub fn soupbin_glimpse(data: &[u8]) {
    use tickgate::venue::nasdaq_itch::{glimpse, soupbin};
    let step = 1 + data.first().copied().unwrap_or(0) as usize;
    let mut d = soupbin::Decoder::with_max_len(256);
    let mut consumed = 0usize;
    let mut pushed = 0usize;
    let mut out = Vec::new();
    'stream: for chunk in data.chunks(step) {
        d.push(chunk);
        pushed += chunk.len();
        loop {
            match d.next_packet() {
                Ok(Some(p)) => {
                    out.clear();
                    p.encode(&mut out).expect("a decoded packet encodes");
                    // Same length and type (numbers may have had leading
                    // zeros), and the encoding decodes to the same packet.
                    assert_eq!(&data[consumed..consumed + 3], &out[..3], "length and type");
                    assert_eq!(
                        soupbin::Packet::parse(out[2], &out[3..]),
                        Ok(p),
                        "round trip"
                    );
                    consumed += out.len();
                    if let soupbin::Packet::SequencedData(m) = p {
                        if let Ok(msg) = glimpse::decode(m) {
                            out.clear();
                            glimpse::encode(&msg, &mut out);
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => break 'stream,
            }
        }
        assert!(d.buffered() <= 2 + d.max_len() + step, "bounded buffering");
        assert_eq!(consumed + d.buffered(), pushed);
    }
    let _ = glimpse::parse_end_of_snapshot(data);
    let _ = glimpse::decode(data);
}

/// The Cboe PITCH decoders (venues.md `cboe-pitch`; recovery.md R4c,
/// R5c). The input is cut into datagrams as for `wire_feed`, and the whole
/// input is one datagram too: each is validated (`frame::Datagram::parse`)
/// and a valid one walked, every message decoded (only unknown types may
/// fail, and they number what the parse counted), encoded again and
/// decoded to the same message, the Time messages through a unit's clock,
/// the datagram through its unit's session rules (`pitch_session`);
/// an invalid one whose framing holds fails for a reason the walk
/// confirms. Then the input is a TCP stream of GRP or Spin blocks, cut
/// into reads of `1 + first byte` bytes: every message of every block
/// decoded, and re-encoded to a message that decodes the same; the
/// decoder never holds more than one block (its u16 length) beyond a read.
pub fn cboe_pitch(data: &[u8]) {
    use tickgate::venue::cboe_pitch::session::{self, BlockDecoder, SessionMessage};
    use tickgate::venue::cboe_pitch::sessions::{NyDates, UnitSession};
    use tickgate::venue::cboe_pitch::time::UnitClock;
    let mut clock = UnitClock::new();
    let mut units = PitchUnits {
        dates: NyDates::new(),
        units: vec![UnitSession::new(); 256],
        next: vec![0; 256],
    };
    // An arrival from the input's first bytes: any instant, even absurd.
    let mut now = data
        .first_chunk::<8>()
        .map_or(1_796_135_400_000_000_000, |b| i64::from_le_bytes(*b));
    let mut rest = data;
    while rest.len() >= 2 {
        let n = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        pitch_datagram(&rest[2..2 + n], &mut clock, &mut units, now);
        rest = &rest[2 + n..];
        now = now.wrapping_add(1_000_000 * (1 + (n as i64 % 700)));
    }
    pitch_datagram(data, &mut clock, &mut units, now);

    let step = 1 + data.first().copied().unwrap_or(0) as usize;
    let mut d = BlockDecoder::new();
    let mut out = Vec::new();
    'stream: for chunk in data.chunks(step) {
        d.push(chunk);
        loop {
            match d.next_block() {
                Ok(Some(b)) => {
                    for m in b.messages() {
                        let Ok(m) = m else { continue };
                        if let SessionMessage::Unknown { .. } = m {
                            continue;
                        }
                        out.clear();
                        m.encode(&mut out).expect("a decoded message encodes");
                        assert_eq!(session::decode_message(&out), Ok(m), "round trip");
                    }
                }
                Ok(None) => break,
                Err(_) => break 'stream,
            }
        }
        assert!(
            d.buffered() <= u16::MAX as usize + step,
            "bounded buffering"
        );
    }
}

/// A valid datagram through its unit's session rules, on the line its
/// length's parity names: a gap line never begins a session, a session
/// begun is running, and an ended session only ends again by a new one.
fn pitch_session(
    p: &tickgate::venue::cboe_pitch::frame::Datagram<'_>,
    d: &[u8],
    units: &mut PitchUnits,
    now: i64,
) {
    use tickgate::venue::cboe_pitch::sessions::{PitchLine, Verdict};
    let line = if d.len() % 2 == 0 {
        PitchLine::Realtime
    } else {
        PitchLine::Gap
    };
    let u = p.header.unit as usize;
    let date = units.dates.date(now);
    let unit = &mut units.units[u];
    let v = unit.classify(line, p, d, date, units.next[u]);
    match v {
        Verdict::FirstSession | Verdict::NewSession(_) => {
            assert_eq!(line, PitchLine::Realtime, "a gap line began a session");
            assert_eq!(matches!(v, Verdict::FirstSession), !unit.started());
            unit.begin();
            units.next[u] = p.header.sequence as u64;
        }
        Verdict::Current => assert!(unit.started() && !unit.ended()),
        Verdict::EndedCopy => {
            assert!(unit.ended());
            return;
        }
        Verdict::GapDropped => {
            assert_eq!(line, PitchLine::Gap);
            assert!(!unit.started() || unit.ended());
            return;
        }
        Verdict::Unsequenced => return,
    }
    units.next[u] = units.next[u].max(p.header.next_sequence());
    let end = p.messages().any(|m| m[1] == 0x2D);
    unit.processed(p, d, date, end);
    if end {
        assert!(unit.ended(), "an End of Session processed ends the session");
    }
}

/// Every unit's session state for `cboe_pitch`, with a `next` per unit as
/// simple channel rules would keep it (the furthest sequence seen).
struct PitchUnits {
    dates: tickgate::venue::cboe_pitch::sessions::NyDates,
    units: Vec<tickgate::venue::cboe_pitch::sessions::UnitSession>,
    next: Vec<u64>,
}

fn pitch_datagram(
    d: &[u8],
    clock: &mut tickgate::venue::cboe_pitch::time::UnitClock,
    units: &mut PitchUnits,
    now: i64,
) {
    use tickgate::venue::cboe_pitch::frame::{Block, Datagram, FrameError};
    use tickgate::venue::cboe_pitch::messages::{self, DecodeError, Message};
    match (Datagram::parse(d), Block::parse(d)) {
        (Ok(p), Ok(b)) => {
            assert_eq!((p.header, p.body), (b.header, b.body));
            assert_ne!(p.header.unit, 0);
            let mut count = 0usize;
            let mut unknown = 0u8;
            let mut bytes = 0usize;
            let mut out = Vec::new();
            for (seq, raw) in p.sequenced() {
                assert_eq!(seq, p.header.sequence.wrapping_add(count as u32));
                count += 1;
                bytes += raw.len();
                assert_eq!(raw[0] as usize, raw.len());
                match messages::decode(raw) {
                    Ok(m) => {
                        out.clear();
                        messages::encode(&m, &mut out).expect("a decoded message encodes");
                        assert_eq!(messages::decode(&out), Ok(m), "round trip");
                        match m {
                            Message::Time { seconds } => {
                                let _ = clock.on_time(seconds, now);
                            }
                            other => {
                                let _ = other.time_offset().map(|o| clock.stamp(o));
                            }
                        }
                    }
                    Err(DecodeError::UnknownType { .. }) => unknown += 1,
                    Err(e) => panic!("a valid datagram's message does not decode: {e}"),
                }
            }
            assert_eq!(count, p.header.count as usize);
            assert_eq!(bytes, p.body.len());
            assert_eq!(unknown, p.unknown);
            pitch_session(&p, d, units, now);
        }
        (Ok(_), Err(e)) => panic!("a valid datagram whose framing fails: {e}"),
        (Err(e), Ok(b)) => match e {
            FrameError::UnitZero => assert_eq!(b.header.unit, 0),
            FrameError::SequenceOverflow { .. } => {
                assert!(b.header.sequence as u64 + b.header.count as u64 - 1 > u32::MAX as u64)
            }
            FrameError::Message { index, error } => {
                let raw = b
                    .messages()
                    .nth(index as usize)
                    .expect("the message exists");
                assert_eq!(messages::decode(raw), Err(error));
            }
            other => panic!("framing holds but the datagram fails on it: {other}"),
        },
        (Err(a), Err(b)) => assert_eq!(a, b),
    }
    clock.untime();
}

/// Re-request answers (recovery.md R1-R4) interleaved with the lines and
/// time: the first byte sets the hold (`gap_hold_packets` 1-8,
/// `gap_hold_us` 0-1750, one re-request server, 1 ms timeout, 1-4
/// attempts); then each op is a byte, a two-byte little-endian length and
/// that many bytes. Time moves `op >> 2` x 50 us; `op & 3` is 0 or 1: a
/// datagram on that line, 2: a re-request answer, 3: `handle_timeout` (and,
/// when its first byte is odd, a datagram from a stranger). After every op
/// the requests are taken as the I/O shell takes them. Checked: no panic;
/// never more than `gap_hold_packets` held; every opened hole is open,
/// filled or lost; an answer never changes the session; the counters of
/// answers and requests match what went in and out; a request names the
/// current session and at least one message; never more than 100 requests
/// in a second (R4); and once time runs past every deadline, no hole is
/// left open.
pub fn rerequest_answers(data: &[u8]) {
    use tickgate::feed::{DatagramOutcome, Recovery};
    let Some((&conf, mut rest)) = data.split_first() else {
        return;
    };
    let hold_packets = 1 + (conf & 7) as usize;
    let mut feed = Feed::new(
        FeedSettings {
            max_symbols: 64,
            recovery: Recovery {
                gap_hold_us: ((conf >> 3) & 7) as u64 * 250,
                gap_hold_packets: hold_packets,
                rerequest_servers: 1,
                rerequest_timeout_ms: 1,
                rerequest_attempts: 1 + (conf >> 6) as u32,
                snapshot: false,
                ..Recovery::default()
            },
            ..FeedSettings::default()
        },
        2,
    );
    let mut now = 1_796_025_600_000_000_000i64;
    let (mut answers, mut foreign, mut taken) = (0u64, 0u64, 0u64);
    // The last 100 requests' times (R4's ceiling).
    let mut sent = [i64::MIN; 100];
    let mut sent_at = 0usize;
    let check = |feed: &Feed, answers: u64, foreign: u64, taken: u64| {
        let r = &feed.counters().recovery;
        let held = feed.hold_usage().0;
        assert!(held <= hold_packets, "{held} held, bound {hold_packets}");
        assert_eq!(feed.recovering(), held > 0);
        assert_eq!(
            r.holes_opened,
            r.holes_filled + r.holes_lost + u64::from(feed.recovering()),
            "{r:?}"
        );
        assert_eq!(r.answers_received, answers);
        assert_eq!(r.answers_wrong_source, foreign);
        assert!(r.answers_wrong_session + r.answers_not_data <= r.answers_received);
        assert!(r.messages_recovered <= feed.counters().rerequest.messages);
        assert_eq!(r.requests_sent, taken);
        assert!(r.hold_overflows <= r.holes_lost);
    };
    while rest.len() >= 3 {
        let op = rest[0];
        let n = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let dgram = &rest[3..3 + n];
        rest = &rest[3 + n..];
        now += (op >> 2) as i64 * 50_000;
        match op & 3 {
            line @ (0 | 1) => {
                feed.on_datagram(line as usize, dgram, now);
            }
            2 => {
                let session = feed.current_session();
                let changes = feed.counters().session_changes;
                let out = feed.on_rerequest_answer(dgram, now);
                if !matches!(out, DatagramOutcome::Invalid(_)) {
                    answers += 1;
                }
                assert_eq!(feed.current_session(), session, "an answer's session");
                assert_eq!(feed.counters().session_changes, changes);
            }
            _ => {
                feed.handle_timeout(now);
                if dgram.first().is_some_and(|b| b & 1 == 1) {
                    feed.count_foreign_answer();
                    foreign += 1;
                }
            }
        }
        while let Some((server, req)) = feed.poll_request() {
            taken += 1;
            assert_eq!(server, 0, "one server configured");
            assert_eq!(Some(req.session), feed.current_session());
            assert!(req.sequence >= 1 && req.count >= 1, "{req:?}");
            assert!(
                sent[sent_at] == i64::MIN || now - sent[sent_at] >= 1_000_000_000,
                "more than 100 requests within a second"
            );
            sent[sent_at] = now;
            sent_at = (sent_at + 1) % sent.len();
        }
        check(&feed, answers, foreign, taken);
    }
    // Time runs past every deadline: nothing stays held.
    now += 10_000_000_000;
    feed.handle_timeout(now);
    while feed.poll_request().is_some() {
        taken += 1;
    }
    check(&feed, answers, foreign, taken);
    assert!(!feed.recovering(), "a hole outlived its deadline");
}

pub const TARGETS: [(&str, fn(&[u8])); 11] = [
    ("wire_feed", wire_feed),
    ("gate_request", gate_request),
    ("capture_reader", capture_reader),
    ("binaryfile_reader", binaryfile_reader),
    ("fills_events", fills_events),
    ("iex_tops_feed", iex_tops_feed),
    ("nasdaq_itch_feed", nasdaq_itch_feed),
    ("soupbin_glimpse", soupbin_glimpse),
    ("rerequest_answers", rerequest_answers),
    ("cme_sbe", cme_sbe),
    ("cboe_pitch", cboe_pitch),
];

//! A Nasdaq BinaryFILE replays in runs of datagrams whose message blocks
//! go to the feed as they are (`CaptureStream::next_run`,
//! `Replay::on_run`, `Feed::on_blocks`), no datagram built to be parsed
//! again: the same summary, quotes, books' live orders, sessions and
//! counters as applying each datagram built whole (`next_datagram`,
//! `on_datagram`). Runs of a simulated capture with losses on both lines,
//! a session change and an end of session give the same too: the channel
//! and recovery rules see no difference, and the datagrams they must hold
//! go the datagram way.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tickgate::capture::source::{DatagramRun, RunDatagram};
use tickgate::capture::stream::{CaptureStream, StreamOptions, StreamSummary};
use tickgate::feed::FeedSettings;
use tickgate::replay::engine::Replay;
use tickgate::replay::summary::summary_json;
use tickgate::venue::VenueKind;

fn simulate(extra: &[&str], out: &Path) {
    let mut args = vec![
        "simulate",
        "--venue",
        "nasdaq-itch",
        "--duration",
        "1",
        "--symbols",
        "40",
        "--rate",
        "20000",
        "--batch",
        "4",
        "--orders",
        "3000",
        "--seed",
        "11",
        "--end-session",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(&args)
        .output()
        .expect("running tickgate simulate");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn replay() -> Replay {
    Replay::single_venue_feed(FeedSettings::for_venue(VenueKind::NasdaqItch), &[]).discover_lines()
}

fn open(path: &Path) -> CaptureStream {
    CaptureStream::open_assuming_sorted(&[path.to_path_buf()], StreamOptions::default())
        .unwrap()
        .expect("one reader fits")
}

/// The summary without what differs by design: the buffers the ordering
/// held (a run's buffer, or two datagrams').
fn comparable(sum: &StreamSummary, r: &Replay) -> Value {
    let mut v = summary_json(sum, r);
    v["sort"]
        .as_object_mut()
        .unwrap()
        .remove("peak_bytes")
        .expect("peak_bytes");
    v
}

/// A simulated BinaryFILE day (line A) in `dir`, and its summary replayed
/// datagram by datagram.
fn day_by_datagram(dir: &Path) -> (PathBuf, Value) {
    let day = dir.join("11302026.NASDAQ_ITCH50");
    simulate(&["--lines", "A"], &day);
    let mut cap = open(&day);
    let mut by_datagram = replay();
    while let Some(d) = cap.next_datagram() {
        by_datagram.on_datagram(d.src, d.dst, d.payload, d.ts);
    }
    assert!(cap.error().is_none());
    let want = comparable(&cap.summary(), &by_datagram);
    (day, want)
}

#[test]
fn a_binaryfile_in_runs_replays_as_datagram_by_datagram() {
    let dir = tempfile::tempdir().unwrap();
    let (day, want) = day_by_datagram(dir.path());

    let mut cap = open(&day);
    let mut by_run = replay();
    let mut runs = 0;
    while let Some(run) = cap.next_run() {
        assert!(!run.is_empty());
        by_run.on_run(run);
        runs += 1;
    }
    // the stream ends where the runs did
    assert!(cap.next_datagram().is_none());
    assert!(cap.error().is_none());
    let got = comparable(&cap.summary(), &by_run);

    assert!(runs > 10 && runs < want["datagrams"].as_u64().unwrap() / 4);
    assert_eq!(got, want);
    let f = &want["feeds"][0];
    assert_eq!(want["symbols"].as_object().unwrap().len(), 40);
    assert!(f["live_orders"].as_u64().unwrap() > 1000, "{f}");
}

/// One datagram of a capture.
struct Datagram {
    ts: i64,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: Vec<u8>,
}

/// A MoldUDP64 datagram's session, sequence, count and blocks.
fn mold(p: &[u8]) -> ([u8; 10], u64, u16, &[u8]) {
    (
        p[..10].try_into().unwrap(),
        u64::from_be_bytes(p[10..18].try_into().unwrap()),
        u16::from_be_bytes([p[18], p[19]]),
        &p[20..],
    )
}

/// The datagrams as runs: consecutive data packets of one session that
/// follow on in sequence, between the same addresses, at most `cap(i)`
/// datagrams a run (`i`: the run's number); a heartbeat or end of session
/// is a run of its own.
fn as_runs(datagrams: &[Datagram], cap: impl Fn(usize) -> usize) -> Vec<DatagramRun> {
    let mut runs: Vec<DatagramRun> = Vec::new();
    let mut next_seq = None;
    for d in datagrams {
        let (session, seq, count, blocks) = mold(&d.payload);
        // 0: a heartbeat, 0xFFFF: an end of session (wire.md)
        let data = count != 0 && count != 0xFFFF;
        let joins = runs.last().is_some_and(|r| {
            data && r.src == d.src
                && r.dst == d.dst
                && r.session.0 == session
                && next_seq == Some(seq)
                && r.len() < cap(runs.len() - 1)
        });
        if !joins {
            let mut r = DatagramRun {
                src: d.src,
                dst: d.dst,
                first_sequence: seq,
                ..DatagramRun::default()
            };
            r.session.0 = session;
            runs.push(r);
        }
        let r = runs.last_mut().unwrap();
        r.datagrams.push(RunDatagram {
            ts_ns: d.ts,
            count,
            len: blocks.len() as u32,
        });
        r.blocks.extend_from_slice(blocks);
        // a heartbeat or end of session is never joined
        next_seq = data.then(|| seq + count as u64);
    }
    runs
}

#[test]
fn runs_of_a_capture_with_gaps_and_sessions_replay_as_its_datagrams() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("day.pcap");
    simulate(
        &[
            "--lines",
            "A,B",
            "--loss-a",
            "0.05",
            "--loss-b",
            "0.05",
            "--session-change-at",
            "0.5",
            "--channel-heartbeat-ms",
            "50",
        ],
        &pcap,
    );
    let mut cap = CaptureStream::open(&[pcap], StreamOptions::default()).unwrap();
    let mut datagrams = Vec::new();
    while let Some(d) = cap.next_datagram() {
        datagrams.push(Datagram {
            ts: d.ts,
            src: d.src,
            dst: d.dst,
            payload: d.payload.to_vec(),
        });
    }
    let sum = cap.summary();

    let mut by_datagram = replay();
    for d in &datagrams {
        by_datagram.on_datagram(d.src, d.dst, &d.payload, d.ts);
    }
    let want = summary_json(&sum, &by_datagram);
    let f = &want["feeds"][0];
    assert!(want["channel_lost"].as_u64().unwrap() > 0, "{want}");
    assert!(want["duplicate_packets"].as_u64().unwrap() > 1000);
    assert_eq!(f["sessions"].as_array().unwrap().len(), 2);

    // Runs of every length from one datagram, and runs as long as they go.
    let caps: [fn(usize) -> usize; 3] = [|_| 1, |i| 1 + i % 7, |_| usize::MAX];
    for cap in caps {
        let runs = as_runs(&datagrams, cap);
        assert!(runs.len() < datagrams.len() || cap(0) == 1);
        let mut by_run = replay();
        for r in &runs {
            by_run.on_run(r);
        }
        assert_eq!(summary_json(&sum, &by_run), want);
    }
}

/// Replay hands the order table's requests for resident memory to its
/// sink (in `tickgate replay`, the helper thread that has the kernel make
/// them resident; docs/venues.md "Tables in replay"), run by run and
/// datagram by datagram: stretches of at most `AHEAD_BYTES`, each asked
/// for once, ahead of one another. The replay is the same with a sink or
/// without.
#[test]
fn the_order_tables_pages_are_asked_for_ahead_of_use() {
    use std::cell::RefCell;
    use std::rc::Rc;
    use tickgate::util::pages::MemRange;
    use tickgate::venue::nasdaq_itch::orders::AHEAD_BYTES;

    let dir = tempfile::tempdir().unwrap();
    let (day, want) = day_by_datagram(dir.path());

    for by_run in [false, true] {
        let asked: Rc<RefCell<Vec<MemRange>>> = Rc::default();
        let mut r = replay();
        let sink = asked.clone();
        r.populate_with(move |range| sink.borrow_mut().push(range));
        let mut cap = open(&day);
        if by_run {
            while let Some(run) = cap.next_run() {
                r.on_run(run);
            }
        }
        while let Some(d) = cap.next_datagram() {
            r.on_datagram(d.src, d.dst, d.payload, d.ts);
        }
        assert_eq!(comparable(&cap.summary(), &r), want, "by run: {by_run}");
        let asked = asked.borrow();
        assert!(!asked.is_empty(), "by run: {by_run}");
        assert!(asked.iter().all(|a| a.len > 0 && a.len <= AHEAD_BYTES));
        assert!(asked.windows(2).all(|w| w[0].addr + w[0].len <= w[1].addr));
    }
}

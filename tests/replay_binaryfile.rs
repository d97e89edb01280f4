//! Nasdaq BinaryFILE (historical TotalView-ITCH days) through `simulate`
//! and `replay`, run as the real binary: a simulated day written as a
//! BinaryFILE replays to the same books and answers as the same day's
//! pcap; stamps follow the New York date (daylight saving included); bad
//! files are clear errors naming the file, the message and the byte.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tickgate::capture::binaryfile::{system_event, BinaryFileWriter};

fn tickgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(args)
        .output()
        .expect("running tickgate")
}

fn ok(args: &[&str]) -> Output {
    let out = tickgate(args);
    assert!(
        out.status.success(),
        "tickgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(args: &[&str]) -> Value {
    let mut all = vec!["replay", "--venue", "nasdaq-itch", "--json"];
    all.extend_from_slice(args);
    serde_json::from_slice(&ok(&all).stdout).expect("one JSON object")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The same seeded day: books of 40 symbols, 4 messages a packet.
const DAY: &[&str] = &[
    "simulate",
    "--venue",
    "nasdaq-itch",
    "--lines",
    "A",
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
];

fn simulate(out: &Path) {
    let mut args = DAY.to_vec();
    args.extend_from_slice(&["--out", p(out)]);
    ok(&args);
}

/// The simulator's default start: 2026-11-30T09:00:00Z, 04:00 in New York.
const START: i64 = 1_796_029_200_000_000_000;

#[test]
fn a_simulated_day_as_binaryfile_replays_as_its_pcap() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("day.pcap");
    let plain = dir.path().join("11302026.NASDAQ_ITCH50");
    let gz = dir.path().join("11302026.NASDAQ_ITCH50.gz");
    simulate(&pcap);
    simulate(&plain);
    simulate(&gz);
    assert_eq!(std::fs::read(&plain).unwrap()[..3], [0, 12, b'S']);
    assert_eq!(std::fs::read(&gz).unwrap()[..2], [0x1f, 0x8b]);

    let a = json(&[p(&pcap)]);
    for file in [&plain, &gz] {
        let b = json(&[p(file)]);
        assert_eq!(b["format"], "binaryfile");
        assert_eq!(b["binaryfile"]["date"], "2026-11-30");
        assert_eq!(b["binaryfile"]["session"], "20261130BF");
        assert_eq!(b["symbols"].as_object().unwrap().len(), 40);
        // the same books, quotes, stamps and sequences
        assert_eq!(a["symbols"], b["symbols"]);
        let (fa, fb) = (&a["feeds"][0], &b["feeds"][0]);
        for k in [
            "packets",
            "messages",
            "message_types",
            "live_orders",
            "channel_lost",
            "unknown_orders",
            "order_conflicts",
            "symbols_quoted",
        ] {
            assert_eq!(fa[k], fb[k], "{k}");
        }
        assert!(fb["live_orders"].as_u64().unwrap() > 1000);
        for k in ["first_ts", "last_ts", "first_sequence", "next_sequence"] {
            assert_eq!(fa["sessions"][0][k], fb["sessions"][0][k], "{k}");
        }
        assert_eq!(
            b["binaryfile"]["messages"],
            fb["sessions"][0]["next_sequence"].as_u64().unwrap() - 1
        );
    }

    // the gate's answers at times through the day
    let checks = dir.path().join("checks.txt");
    let mut lines = Vec::new();
    for (i, ms) in [0i64, 1, 50, 333, 700, 1000, 2500].iter().enumerate() {
        let t = START + ms * 1_000_000;
        for s in [1, 2, 17, 40] {
            lines.push(format!("{t} CHECK S{s:05}"));
        }
        if i == 3 {
            lines.push(format!("{t} CHECK S{:05} stale_ms=1", 3));
        }
    }
    std::fs::write(&checks, lines.join("\n") + "\n").unwrap();
    let answers = |f: &Path| {
        let out = ok(&[
            "replay",
            p(f),
            "--venue",
            "nasdaq-itch",
            "--checks",
            p(&checks),
        ]);
        String::from_utf8(out.stdout).unwrap()
    };
    let want = answers(&pcap);
    assert_eq!(want.lines().count(), lines.len());
    assert!(want.contains("OK S00017"), "{want}");
    assert_eq!(answers(&plain), want);
    assert_eq!(answers(&gz), want);
}

/// A BinaryFILE of a System Event at `ts` ns after midnight, an Add and a
/// Delete a second later.
fn small_day(ts: u64) -> Vec<u8> {
    use tickgate::venue::nasdaq_itch::messages::{encode, Header, Message, Side};
    use tickgate::wire::Symbol;
    let mut w = BinaryFileWriter::new(Vec::new());
    w.write_message(&system_event(ts, b'O')).unwrap();
    let header = |ts| Header {
        locate: 1,
        tracking: 0,
        timestamp: ts,
    };
    for m in [
        Message::AddOrder {
            header: header(ts + 1_000_000_000),
            order_ref: 7,
            side: Side::Buy,
            shares: 100,
            stock: Symbol::parse("ACME").unwrap(),
            price: 12_3400,
            attribution: None,
        },
        Message::Delete {
            header: header(ts + 2_000_000_000),
            order_ref: 7,
        },
    ] {
        let mut b = Vec::new();
        encode(&m, &mut b);
        w.write_message(&b).unwrap();
    }
    w.into_inner()
}

#[test]
fn stamps_are_new_york_midnight_of_the_named_or_given_date() {
    let dir = tempfile::tempdir().unwrap();
    let nine_thirty = (9 * 3600 + 30 * 60) * 1_000_000_000u64;
    // 2019-01-30 is EST (UTC-5), 2019-07-15 EDT (UTC-4)
    let jan_midnight: i64 = 1_548_824_400_000_000_000;
    let jul_midnight: i64 = 1_563_163_200_000_000_000;
    let jan = dir.path().join("01302019.NASDAQ_ITCH50");
    let jul = dir.path().join("07152019.NASDAQ_ITCH50");
    let undated = dir.path().join("day.itch");
    for f in [&jan, &jul, &undated] {
        std::fs::write(f, small_day(nine_thirty)).unwrap();
    }
    let v = json(&[p(&jan)]);
    assert_eq!(v["first_ts"], jan_midnight + nine_thirty as i64);
    assert_eq!(
        v["last_ts"],
        jan_midnight + nine_thirty as i64 + 2_000_000_000
    );
    let v = json(&[p(&jul)]);
    assert_eq!(v["first_ts"], jul_midnight + nine_thirty as i64);
    assert_eq!(v["binaryfile"]["session"], "20190715BF");
    // --date when the name has none, and over the name's
    let v = json(&[p(&undated), "--date", "2019-07-15"]);
    assert_eq!(v["first_ts"], jul_midnight + nine_thirty as i64);
    let v = json(&[p(&jan), "--date", "2019-07-15"]);
    assert_eq!(v["first_ts"], jul_midnight + nine_thirty as i64);
    // readable: 09:30 New York is 14:30Z in January
    let out = ok(&["replay", p(&jan), "--venue", "nasdaq-itch"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("time 2019-01-30T14:30:00.000000000Z"),
        "{text}"
    );
    assert!(text.contains("3 messages of 2019-01-30"), "{text}");
    // no date at all: said, with both ways out
    let out = tickgate(&["replay", p(&undated), "--venue", "nasdaq-itch"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("day.itch") && err.contains("--date YYYY-MM-DD"),
        "{err}"
    );
}

fn fails_with(file: &Path, want: &[&str]) -> Value {
    let out = tickgate(&[
        "replay",
        p(file),
        "--venue",
        "nasdaq-itch",
        "--json",
        "--date",
        "2019-01-30",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(p(file)), "{err}");
    for w in want {
        assert!(err.contains(w), "{w:?} not in {err}");
    }
    // the summary of what came before is still printed
    serde_json::from_slice(&out.stdout).expect("summary of what came before")
}

#[test]
fn bad_files_are_errors_naming_file_message_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let good = small_day(1_000);
    // 12 + 2, 36 + 2, 19 + 2 bytes

    // a length running past the end
    let cut = dir.path().join("cut.itch");
    std::fs::write(&cut, &good[..good.len() - 5]).unwrap();
    let v = fails_with(
        &cut,
        &[
            "BinaryFILE message 3 at byte 52",
            "claims 19 bytes but the file ends after 14",
        ],
    );
    assert_eq!(v["binaryfile"]["messages"], 2);
    assert_eq!(v["feeds"][0]["live_orders"], 1);

    // a zero length
    let zero = dir.path().join("zero.itch");
    let mut b = good[..52].to_vec();
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&good[52..]);
    std::fs::write(&zero, b).unwrap();
    fails_with(&zero, &["message 3 at byte 52: zero length"]);

    // a truncated gzip
    let gz = dir.path().join("cut.itch.gz");
    let big: Vec<u8> = (0..20_000u64)
        .flat_map(|i| small_day(i * 3_000_000_000))
        .collect();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut e, &big).unwrap();
    let z = e.finish().unwrap();
    std::fs::write(&gz, &z[..z.len() / 2]).unwrap();
    let v = fails_with(&gz, &["BinaryFILE message", "gzip stream ends early"]);
    let read = v["binaryfile"]["messages"].as_u64().unwrap();
    assert!(read > 1000 && read < 60_000, "{read}");

    // not a BinaryFILE, not a pcap
    let junk = dir.path().join("junk");
    std::fs::write(&junk, [0u8, 5, b'?', 1, 2, 3, 4]).unwrap();
    let out = tickgate(&["replay", p(&junk), "--venue", "nasdaq-itch"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a pcap, pcapng or Nasdaq BinaryFILE")
    );
}

#[test]
fn unknown_types_are_passed_counted_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = BinaryFileWriter::new(small_day(5));
    let mut odd = system_event(5, b'O').to_vec();
    odd[0] = b'z';
    w.write_message(&odd).unwrap();
    w.write_message(&odd).unwrap();
    let f = dir.path().join("01302019.NASDAQ_ITCH50");
    std::fs::write(&f, w.into_inner()).unwrap();
    let out = ok(&["replay", p(&f), "--venue", "nasdaq-itch", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["binaryfile"]["unknown_types"], 2);
    assert_eq!(v["binaryfile"]["first_unknown"]["message"], 4);
    assert_eq!(v["binaryfile"]["first_unknown"]["offset"], 73);
    assert_eq!(v["unknown_messages"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("2 BinaryFILE messages of a type ITCH 5.0 does not have, the first message 4 at byte 73 (type 0x7a)"),
        "{err}"
    );
}

#[test]
fn simulate_refuses_what_a_binaryfile_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("11302026.NASDAQ_ITCH50");
    let mut args = DAY.to_vec();
    args.extend_from_slice(&["--out", p(&f), "--loss-a", "0.1"]);
    let out = tickgate(&args);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--loss-a"));
    // a name whose date is not --start's
    let f = dir.path().join("01302019.NASDAQ_ITCH50");
    let mut args = DAY.to_vec();
    args.extend_from_slice(&["--out", p(&f)]);
    let out = tickgate(&args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("2019-01-30") && err.contains("2026-11-30"),
        "{err}"
    );
    // ITCH only
    let out = tickgate(&["simulate", "--out", p(&f)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--venue nasdaq-itch"));
}

/// A BinaryFILE is one sequenced stream: a stamp that goes back is applied
/// in sequence order at the watermark (and counted), not moved ahead of
/// the messages before it, which the channel rules would take as a gap.
#[test]
fn a_stamp_going_back_keeps_sequence_order() {
    use tickgate::venue::nasdaq_itch::messages::{encode, Header, Message, Side};
    use tickgate::wire::Symbol;
    let dir = tempfile::tempdir().unwrap();
    let ms = 1_000_000u64;
    let header = |ts| Header {
        locate: 1,
        tracking: 0,
        timestamp: ts,
    };
    let add = |ts, order_ref| Message::AddOrder {
        header: header(ts),
        order_ref,
        side: Side::Sell,
        shares: 100,
        stock: Symbol::parse("ACME").unwrap(),
        price: 10_0000,
        attribution: None,
    };
    let mut w = BinaryFileWriter::new(Vec::new());
    w.write_message(&system_event(10 * ms, b'O')).unwrap();
    for m in [
        add(20 * ms, 7),
        Message::Delete {
            header: header(19 * ms), // one millisecond back
            order_ref: 7,
        },
        add(30 * ms, 8),
    ] {
        let mut b = Vec::new();
        encode(&m, &mut b);
        w.write_message(&b).unwrap();
    }
    let f = dir.path().join("01302019.NASDAQ_ITCH50");
    std::fs::write(&f, w.into_inner()).unwrap();
    // in sequence order: reordering by stamp would put the Delete before
    // its Add, a gap then a late packet to the channel rules
    {
        let v = json(&[p(&f)]);
        assert_eq!(v["binaryfile"]["stamps_backwards"], 1);
        assert_eq!(v["out_of_order"], 0);
        assert_eq!(v["channel_lost"], 0);
        assert_eq!(v["feeds"][0]["unknown_orders"], 0);
        assert_eq!(v["feeds"][0]["live_orders"], 1);
        // the Delete at the Add's stamp
        assert_eq!(v["last_ts"], 1_548_824_400_000_000_000i64 + 30_000_000);
    }
}

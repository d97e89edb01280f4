//! The fuzz targets without libFuzzer (stable Rust): each target runs over
//! its seed corpus, then over random mutations of it (bit flips, byte
//! changes, insertions, deletions, duplicated ranges, splices, cuts) for a
//! while. A panic is a crash: the input is written to
//! `fuzz/artifacts/<target>/` and the run exits 1.
//!
//! ```text
//! cargo run --release --bin replay -- [--seconds S] [--write-seeds DIR] [TARGET...]
//! ```
//!
//! `--write-seeds DIR` writes each target's seed corpus to `DIR/<target>/`
//! (what `fuzz/run.sh` gives libFuzzer) and exits.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tickgate_fuzz::TARGETS;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.retain(|p| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e))
    });
    out.sort();
    out
}

fn captures() -> Vec<PathBuf> {
    let mut v = files(&repo().join("fixtures/real"), &["pcap", "pcapng"]);
    v.extend(files(&repo().join("fixtures/gen"), &["pcap", "pcapng"]));
    v
}

/// The spec's test vectors (hex datagrams): the repository's `spec/`, or
/// `TICKGATE_SPEC_DIR` when set (another version of the contract).
fn vectors() -> Vec<Vec<u8>> {
    let candidates = [
        std::env::var("TICKGATE_SPEC_DIR").map(PathBuf::from).ok(),
        Some(repo().join("spec")),
    ];
    for dir in candidates.into_iter().flatten() {
        let Ok(text) = std::fs::read_to_string(dir.join("vectors.json")) else {
            continue;
        };
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        return doc["vectors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["hex"].as_str())
            .filter_map(|h| {
                (0..h.len() / 2)
                    .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok())
                    .collect()
            })
            .collect();
    }
    Vec::new()
}

/// The packets of `cme_scenarios.json` (venues.md `cme-mdp3`: snapshots,
/// definitions, channel resets and status messages of schema 9, which the
/// real captures lack), each alone and all together, from the repository's
/// `spec/` or `TICKGATE_SPEC_DIR`.
fn cme_scenario_seeds() -> Vec<Vec<u8>> {
    scenario_seeds("cme_scenarios.json")
}

/// The hex datagrams of a spec scenario file, each alone and all together.
fn scenario_seeds(file: &str) -> Vec<Vec<u8>> {
    let candidates = [
        std::env::var("TICKGATE_SPEC_DIR").map(PathBuf::from).ok(),
        Some(repo().join("spec")),
    ];
    for dir in candidates.into_iter().flatten() {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let packets: Vec<Vec<u8>> = doc["scenarios"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["steps"].as_array().into_iter().flatten())
            .filter_map(|step| step["hex"].as_str())
            .filter_map(|h| {
                (0..h.len() / 2)
                    .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok())
                    .collect()
            })
            .collect();
        let mut out: Vec<Vec<u8>> = packets
            .iter()
            .map(|p| frame(std::slice::from_ref(p)))
            .collect();
        out.push(frame(&packets));
        return out;
    }
    Vec::new()
}

/// Cboe PITCH: the real capture's datagrams, `pitch_scenarios.json`'s,
/// and GRP and Spin streams as the real sessions exchanged them (Login,
/// responses, a Gap Request and its echo, heartbeats, a spin with its
/// Time, an order, a trade and Spin Finished, a refusal), whole and cut
/// short. The first byte (a Hdr Length's) also sets the target's read
/// size.
fn pitch_seeds() -> Vec<Vec<u8>> {
    use tickgate::venue::cboe_pitch::messages::{Message, RawPrice, Width};
    use tickgate::venue::cboe_pitch::session::{
        encode_block, GapStatus, Login, LoginStatus, SessionMessage as M, SpinStatus, HEARTBEAT,
    };
    let mut out = venue_seeds("cboe-pitch-");
    out.extend(scenario_seeds("pitch_scenarios.json"));
    let block = |msgs: &[M]| {
        let mut b = Vec::new();
        encode_block(msgs, &mut b).expect("seed blocks encode");
        b
    };
    let symbol = tickgate::wire::Symbol::parse("AAPL").unwrap();
    let grp: Vec<u8> = [
        block(&[M::Login(Login::new("0006", "MKDA", "").unwrap())]),
        block(&[M::LoginResponse(LoginStatus::Accepted)]),
        HEARTBEAT.to_vec(),
        block(&[M::GapRequest {
            unit: 1,
            sequence: 14,
            count: 1,
        }]),
        block(&[M::GapResponse {
            unit: 1,
            sequence: 14,
            count: 1,
            status: GapStatus::Accepted,
        }]),
        block(&[M::GapResponse {
            unit: 1,
            sequence: 14,
            count: 9,
            status: GapStatus::CountTooLarge,
        }]),
    ]
    .concat();
    let spin: Vec<u8> = [
        block(&[M::Login(Login::new("0023", "BATS", "s1bats").unwrap())]),
        block(&[M::LoginResponse(LoginStatus::Accepted)]),
        block(&[M::SpinImageAvailable { sequence: 312 }]),
        block(&[M::SpinRequest { sequence: 312 }]),
        block(&[M::SpinResponse {
            sequence: 312,
            order_count: 1,
            status: SpinStatus::Accepted,
        }]),
        block(&[M::SpinResponse {
            sequence: 0,
            order_count: 0,
            status: SpinStatus::AlreadyRunning,
        }]),
        block(&[
            M::Pitch(Message::Time { seconds: 75442 }),
            M::Pitch(Message::AddOrder {
                width: Width::Long,
                offset: 5,
                order_id: 7,
                side: b'B',
                shares: 100,
                symbol,
                price: 2_500_000,
                flags: 1,
            }),
            M::Pitch(Message::Trade {
                width: Width::Short,
                offset: 6,
                order_id: 7,
                side: b'B',
                shares: 100,
                symbol,
                price: RawPrice::Short(2001),
                execution_id: 9,
            }),
            M::SpinFinished { sequence: 312 },
        ]),
        HEARTBEAT.to_vec(),
    ]
    .concat();
    for stream in [grp, spin] {
        out.push(stream[..stream.len() - 3].to_vec());
        out.push(stream);
    }
    out
}

fn frame(datagrams: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in datagrams {
        out.extend_from_slice(&(d.len().min(u16::MAX as usize) as u16).to_le_bytes());
        out.extend_from_slice(&d[..d.len().min(u16::MAX as usize)]);
    }
    out
}

/// UDP payloads of the real captures whose name starts with `prefix`
/// (their venue's datagrams), framed for a feed target.
fn venue_seeds(prefix: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for c in files(&repo().join("fixtures/real"), &["pcap", "pcapng", "gz"]) {
        let name = c.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with(prefix) {
            continue;
        }
        let Ok(r) = tickgate::capture::pcap::CaptureReader::open(&c) else {
            continue;
        };
        let payloads: Vec<Vec<u8>> = r
            .take(256)
            .filter_map(|d| d.ok())
            .map(|d| d.payload)
            .collect();
        for chunk in payloads.chunks(16) {
            out.push(frame(chunk));
        }
    }
    out
}

/// SoupBinTCP streams as a GLIMPSE client receives them (and a client's
/// packets): login, the snapshot's ITCH messages, End of Snapshot,
/// heartbeats, each packet type alone, and a stream cut short. The first
/// byte also sets the fuzz target's read size.
fn soupbin_seeds() -> Vec<Vec<u8>> {
    use tickgate::venue::nasdaq_itch::glimpse::encode_end_of_snapshot;
    use tickgate::venue::nasdaq_itch::messages::{encode, Header, Message, Side};
    use tickgate::venue::nasdaq_itch::soupbin::{LoginRequest, Packet};
    use tickgate::wire::{SessionId, Symbol};
    let session = SessionId(*b"000010059A");
    let stock = Symbol::parse("S00001").unwrap();
    let header = Header {
        locate: 1,
        tracking: 0,
        timestamp: 34_200_000_000_000,
    };
    let itch = [
        Message::SystemEvent {
            header,
            event: b'O',
        },
        Message::StockDirectory { header, stock },
        Message::TradingAction {
            header,
            stock,
            state: b'T',
            reason: *b"    ",
        },
        Message::AddOrder {
            header,
            order_ref: 7,
            side: Side::Buy,
            shares: 100,
            stock,
            price: 1_000_000,
            attribution: None,
        },
    ];
    let mut singles: Vec<Vec<u8>> = vec![
        Packet::LoginRequest(LoginRequest::new("user", "secret", None, 1).unwrap())
            .encode_to_vec()
            .unwrap(),
        Packet::LoginAccepted {
            session,
            sequence: 1,
        }
        .encode_to_vec()
        .unwrap(),
        Packet::LoginRejected { reason: b'A' }
            .encode_to_vec()
            .unwrap(),
        Packet::ServerHeartbeat.encode_to_vec().unwrap(),
        Packet::EndOfSession.encode_to_vec().unwrap(),
        Packet::Debug(b"debug text").encode_to_vec().unwrap(),
        Packet::ClientHeartbeat.encode_to_vec().unwrap(),
        Packet::LogoutRequest.encode_to_vec().unwrap(),
    ];
    let mut stream = singles[1].clone();
    for m in &itch {
        let mut msg = Vec::new();
        encode(m, &mut msg);
        Packet::SequencedData(&msg).encode(&mut stream).unwrap();
    }
    let mut g = Vec::new();
    encode_end_of_snapshot(12_345, &mut g);
    Packet::SequencedData(&g).encode(&mut stream).unwrap();
    Packet::ServerHeartbeat.encode(&mut stream).unwrap();
    singles.push(g);
    singles.push(stream[..stream.len() / 2].to_vec());
    singles.push(stream);
    singles
}

/// Scripts for `rerequest_answers` (recovery.md R1-R4, tickgate protocol):
/// a hole filled by an answer; one never answered; answers of another
/// session, heartbeats and ends of session; a hole answered in parts; the
/// hold overflowing; a session change while holding; a stranger; and a
/// long run of holes asking for more than 100 requests a second.
fn rerequest_seeds() -> Vec<Vec<u8>> {
    use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};
    const A: u8 = 0;
    const B: u8 = 1;
    const ANSWER: u8 = 2;
    const TIME: u8 = 3;
    let session = SessionId(*b"FUZZSESS01");
    let other = SessionId(*b"OTHERSESS1");
    let packet = |session: SessionId, seq: u64| {
        let mut b = PacketBuilder::new();
        let side = |px| Some(Side { px, qty: seq });
        b.start(session, seq).quote(&Quote::new(
            Symbol::parse(["EURUSD", "GBPUSD", "USDJPY"][seq as usize % 3]).unwrap(),
            seq,
            1_796_025_600_000_000_000,
            side(1_000_000_000 + seq as i64),
            side(1_000_100_000 + seq as i64),
        ));
        b.bytes().to_vec()
    };
    // One op: what it is, and how many 50 us steps time moves first.
    let op = |out: &mut Vec<u8>, kind: u8, steps: u8, bytes: &[u8]| {
        out.push((steps << 2) | kind);
        out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    let p = |seq| packet(session, seq);
    let mut out = Vec::new();
    // Hold 3, 250 us, 1 attempt: 2 is answered; B's late copy of 3.
    let mut s = vec![0b0000_1010];
    op(&mut s, A, 1, &p(1));
    op(&mut s, A, 1, &p(3));
    op(&mut s, TIME, 6, &[]);
    op(&mut s, ANSWER, 2, &p(2));
    op(&mut s, B, 1, &p(3));
    op(&mut s, A, 1, &p(4));
    out.push(s);
    // Never answered, 2 attempts: requests, then lost.
    let mut s = vec![0b0100_1111];
    op(&mut s, A, 1, &p(1));
    op(&mut s, A, 1, &p(4));
    for _ in 0..6 {
        op(&mut s, TIME, 20, &[]);
    }
    op(&mut s, A, 1, &p(5));
    out.push(s);
    // Answers the feed drops: another session, a heartbeat, an end of
    // session; then a hole of two answered in parts.
    let mut s = vec![0b1000_0111];
    op(&mut s, A, 1, &p(1));
    op(&mut s, A, 1, &p(4));
    op(&mut s, TIME, 2, &[]);
    op(&mut s, ANSWER, 1, &packet(other, 2));
    let (heartbeat, end) = (
        PacketBuilder::channel_heartbeat(session, 2),
        PacketBuilder::end_of_session(session, 2),
    );
    op(&mut s, ANSWER, 1, &heartbeat);
    op(&mut s, ANSWER, 1, &end);
    op(&mut s, ANSWER, 1, &p(2));
    op(&mut s, TIME, 1, &[]);
    op(&mut s, ANSWER, 1, &p(3));
    op(&mut s, ANSWER, 1, &p(3));
    op(&mut s, TIME, 40, &[1]);
    out.push(s);
    // Hold 1: the second held packet overflows it; then a session change
    // while a hole is open.
    let mut s = vec![0b0000_1000];
    op(&mut s, A, 1, &p(1));
    op(&mut s, A, 1, &p(3));
    op(&mut s, B, 1, &p(5));
    op(&mut s, A, 1, &p(7));
    op(&mut s, B, 1, &packet(other, 1));
    op(&mut s, ANSWER, 1, &p(8));
    op(&mut s, TIME, 63, &[]);
    out.push(s);
    // Every other packet missing, 1.05 ms apart, 1 ms per attempt: more
    // holes than 100 requests a second can ask for.
    let mut s = vec![0b0100_0111];
    for k in 0..400u64 {
        op(&mut s, A, 11, &p(1 + 2 * k));
        op(&mut s, TIME, 10, &[k as u8]);
    }
    out.push(s);
    out
}

/// BinaryFILEs: the ITCH messages of the real Nasdaq captures' datagrams
/// (their MoldUDP64 blocks have the BinaryFILE's framing), one file per 16
/// datagrams and one of them all; a day opened by a System Event and the
/// same cut inside a length and inside a message.
fn binaryfile_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut all = Vec::new();
    for c in files(&repo().join("fixtures/real"), &["pcap", "pcapng", "gz"]) {
        let name = c.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with("nasdaq-") {
            continue;
        }
        let Ok(r) = tickgate::capture::pcap::CaptureReader::open(&c) else {
            continue;
        };
        let payloads: Vec<Vec<u8>> = r
            .take(256)
            .filter_map(|d| d.ok())
            .map(|d| d.payload)
            .collect();
        for chunk in payloads.chunks(16) {
            let mut f = Vec::new();
            for p in chunk.iter().filter(|p| p.len() > 20) {
                f.extend_from_slice(&p[20..]);
            }
            all.extend_from_slice(&f);
            out.push(f);
        }
    }
    let mut day = Vec::new();
    day.extend_from_slice(&[0, 12]);
    day.extend_from_slice(&tickgate::capture::binaryfile::system_event(
        34_200_000_000_000,
        b'O',
    ));
    day.extend_from_slice(&all[..all.len().min(4096)]);
    out.push(day.clone());
    out.push(day[..13].to_vec());
    out.push(day[..15].to_vec());
    out.push(all);
    out
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "soupbin_glimpse" => soupbin_seeds(),
        "rerequest_answers" => rerequest_seeds(),
        "iex_tops_feed" => venue_seeds("iex-"),
        "nasdaq_itch_feed" => venue_seeds("nasdaq-"),
        "cboe_pitch" => pitch_seeds(),
        "cme_sbe" => {
            let mut out = venue_seeds("cme-mdp3-");
            out.extend(cme_scenario_seeds());
            out
        }
        "wire_feed" => {
            let v = vectors();
            let mut out: Vec<Vec<u8>> = v.iter().map(|d| frame(std::slice::from_ref(d))).collect();
            out.push(frame(&v));
            for c in captures() {
                let Ok(r) = tickgate::capture::pcap::CaptureReader::open(&c) else {
                    continue;
                };
                let payloads: Vec<Vec<u8>> = r
                    .take(64)
                    .filter_map(|d| d.ok())
                    .map(|d| d.payload)
                    .collect();
                out.push(frame(&payloads));
            }
            out
        }
        "binaryfile_reader" => binaryfile_seeds(),
        "capture_reader" => captures()
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .map(|b| b[..b.len().min(1 << 16)].to_vec())
            .collect(),
        "gate_request" => [
            "PING",
            "CHECK EURUSD",
            "CHECK EURUSD stale_ms=100",
            "CHECK EURUSD stale_ms=100 source_max_age_ms=5",
            "CHECK USDJPY source_max_age_ms=18446744073709551615",
            "STATUS",
            "CHECK",
            "CHECK  EURUSD",
            "check eurusd",
            "PING x",
            "CHECK EURUSD\r\nPING\nSTATUS\n",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        "fills_events" => {
            let text =
                std::fs::read_to_string(repo().join("fixtures/events.jsonl")).unwrap_or_default();
            let mut out: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
            out.push(text.as_bytes().to_vec());
            let events: Vec<&str> = text.lines().collect();
            out.push(format!("{{\"events\":[{}]}}", events.join(",")).into_bytes());
            out
        }
        _ => Vec::new(),
    }
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], input: &mut Vec<u8>) {
    input.clear();
    input.extend_from_slice(&seeds[rng.below(seeds.len())]);
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = [0, 0xff, 0x7f, 0x80, b' ', b'\n', b'=', b'9'][rng.below(8)];
            }
            2 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                input.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let copy = input[i..i + n].to_vec();
                let at = rng.below(input.len() + 1);
                input.splice(at..at, copy);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let i = rng.below(other.len());
                    let at = rng.below(len + 1);
                    input.truncate(at);
                    input.extend_from_slice(&other[i..]);
                }
            }
            6 if len > 0 => input.truncate(rng.below(len)),
            _ if len >= 8 => {
                // An interesting integer at a random place.
                let i = rng.below(len - 7);
                let v: u64 = [0, 1, u64::MAX, u64::MAX >> 1, 1 << 63, 0xffff][rng.below(6)];
                input[i..i + 8].copy_from_slice(&v.to_be_bytes());
            }
            _ => {}
        }
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut seconds = 10.0f64;
    let mut write_seeds = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--seconds" => {
                seconds = args[i + 1].parse().expect("--seconds S");
                args.drain(i..i + 2);
            }
            "--write-seeds" => {
                write_seeds = Some(PathBuf::from(&args[i + 1]));
                args.drain(i..i + 2);
            }
            _ => i += 1,
        }
    }
    let chosen: Vec<_> = TARGETS
        .iter()
        .filter(|(n, _)| args.is_empty() || args.iter().any(|a| a == n))
        .collect();
    if let Some(dir) = write_seeds {
        for (name, _) in &chosen {
            let d = dir.join(name);
            std::fs::create_dir_all(&d).unwrap();
            for (k, s) in seeds(name).iter().enumerate() {
                std::fs::write(d.join(format!("seed-{k:04}")), s).unwrap();
            }
        }
        return;
    }
    // A panic is reported by us, once, with the input saved.
    std::panic::set_hook(Box::new(|_| {}));
    let mut crashed = false;
    for (name, target) in chosen {
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "{name}: no seeds");
        let mut rng = Rng(0x5EED ^ name.len() as u64);
        let mut input = Vec::new();
        let start = Instant::now();
        let mut execs = 0u64;
        let mut crashes = 0u64;
        let run = |input: &[u8], execs: &mut u64, crashes: &mut u64| {
            *execs += 1;
            if std::panic::catch_unwind(|| target(input)).is_err() {
                *crashes += 1;
                let d = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("artifacts")
                    .join(name);
                let _ = std::fs::create_dir_all(&d);
                let _ = std::fs::write(d.join(format!("crash-{}", *crashes)), input);
            }
        };
        for s in &seeds {
            run(s, &mut execs, &mut crashes);
        }
        while start.elapsed() < Duration::from_secs_f64(seconds) {
            for _ in 0..256 {
                mutate(&mut rng, &seeds, &mut input);
                run(&input, &mut execs, &mut crashes);
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name}: {execs} executions in {secs:.1} s ({:.0}/s), {} seeds, {crashes} crashes",
            execs as f64 / secs,
            seeds.len()
        );
        crashed |= crashes > 0;
    }
    if crashed {
        eprintln!("crashes written to fuzz/artifacts/");
        std::process::exit(1);
    }
}

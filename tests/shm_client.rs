//! `tickgate::client` against the daemon's own publishing code: answers
//! equal to the socket's byte for byte, remapping when the daemon restarts
//! or the file is replaced, quotes ageing when it stops, and files that
//! are torn or hostile giving errors, never a crash, a hang or a stale OK.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, PermissionsExt};

use tickgate::client::{Client, Error, FileState};
use tickgate::feed::reader::ReadError;
use tickgate::feed::shm::{STATE_LIVE, W_STATE};
use tickgate::feed::table;
use tickgate::feed::{ClockOffset, FeedSettings};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

#[path = "common/shm.rs"]
mod shm;
use shm::{publish_feeds, shm_answer, Rig};

const NOW: i64 = 1_764_489_600_000_000_000;
const MS: i64 = 1_000_000;

fn sym(s: &str) -> Symbol {
    Symbol::parse(s).unwrap()
}

fn settings() -> FeedSettings {
    FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: 1000,
        ..FeedSettings::default()
    }
}

fn packet(seq: u64, q: &Quote) -> Vec<u8> {
    let mut b = PacketBuilder::new();
    b.start(SessionId::parse("S1").unwrap(), seq).quote(q);
    b.bytes().to_vec()
}

fn side(px: i64, qty: u64) -> Option<Side> {
    Some(Side { px, qty })
}

/// md1: EURUSD fresh, GBPUSD old, USDJPY known without data; md2: USDJPY
/// quoted, EURUSD without data (both known to two feeds: gate.md "One
/// symbol on several feeds", a feed without a quote takes no part).
fn market() -> Rig {
    let mut rig = Rig::new(&[("md1", settings()), ("md2", settings())]);
    let f = &mut rig.feeds;
    f[0].add_symbol(sym("USDJPY")).unwrap();
    f[1].add_symbol(sym("EURUSD")).unwrap();
    // Two 20-character names (CME's longest) sharing their first 16 bytes.
    f[1].add_symbol(sym("ESM6-ESU6-ESZ6-ESH7X")).unwrap();
    f[1].add_symbol(sym("ESM6-ESU6-ESZ6-ESH7Y")).unwrap();
    let eur = Quote::new(
        sym("EURUSD"),
        41,
        (NOW - 150 * MS) as u64,
        side(1_085_120_000, 1_000_000),
        side(1_085_150_000, 2_000_000),
    );
    let gbp = Quote::new(
        sym("GBPUSD"),
        7,
        (NOW - 3000 * MS) as u64,
        None,
        side(-500_000_000, 1),
    );
    let jpy = Quote::new(
        sym("USDJPY"),
        3,
        (NOW - 10 * MS) as u64,
        side(150_000_000_000, 5),
        None,
    );
    f[0].on_datagram(0, &packet(1, &gbp), NOW - 3000 * MS);
    f[0].on_datagram(0, &packet(2, &eur), NOW - 100 * MS);
    f[1].on_datagram(0, &packet(1, &jpy), NOW - 5 * MS);
    rig
}

const REQUESTS: &[&str] = &[
    "CHECK EURUSD",
    "CHECK GBPUSD",
    "CHECK USDJPY",
    "CHECK NOPE",
    "CHECK EURUSD stale_ms=50",
    "CHECK EURUSD source_ms=100 stale_ms=200",
    "CHECK EURUSD stale_ms=100000",
    "CHECK EURUSD source_ms=x",
    "CHECK TOOLONGSYMBOL",
    "CHECK ESM6-ESU6-ESZ6-ESH7X",
    "CHECK ESM6-ESU6-ESZ6-ESH7Z",
    "CHECK ESM6-ESU6-ESZ6-ESH7XY",
    "CHECK",
    "PING",
    "FOO",
];

#[test]
fn answers_equal_the_socket_byte_for_byte() {
    let mut rig = market();
    let mut client = rig.client();
    assert_eq!(client.header().feeds.len(), 2);
    assert_eq!(client.header().feeds[1].name, "md2");
    for at in [NOW, NOW + 450 * MS, NOW + 5000 * MS] {
        for r in REQUESTS {
            let want = rig.socket_answer(r, at);
            assert_eq!(shm_answer(&mut client, r, at), want, "{r} at {at}");
        }
    }
    // The answers are the interesting ones, not all alike.
    let eur = shm_answer(&mut client, "CHECK EURUSD", NOW);
    assert_eq!(
        eur,
        "OK EURUSD seq=- bid=1.08512@1000000 ask=1.08515@2000000 silence_us=100000 source_age_us=150000 feeds=md1:OK,md2:no_data\n"
    );
    assert_eq!(
        shm_answer(&mut client, "CHECK EURUSD feed=md1", NOW),
        "OK EURUSD seq=41 bid=1.08512@1000000 ask=1.08515@2000000 silence_us=100000 source_age_us=150000\n"
    );
    assert!(shm_answer(&mut client, "CHECK USDJPY", NOW).starts_with("OK USDJPY seq=- bid=150@5"));
    // gate.md: up to 20 characters name a symbol; beyond, none can exist.
    assert_eq!(
        shm_answer(&mut client, "CHECK ESM6-ESU6-ESZ6-ESH7X", NOW),
        "REJECT ESM6-ESU6-ESZ6-ESH7X no_data seq=- bid=- ask=- silence_us=- source_age_us=-\n"
    );
    for unknown in ["ESM6-ESU6-ESZ6-ESH7Z", "ESM6-ESU6-ESZ6-ESH7XY"] {
        assert!(
            shm_answer(&mut client, &format!("CHECK {unknown}"), NOW)
                .starts_with(&format!("REJECT {unknown} unknown_symbol ")),
            "{unknown}"
        );
    }
    let v = client.check(b"GBPUSD", NOW, None, None).unwrap();
    assert!(!v.ok());
    assert!(matches!(
        client.check(b"EURUSD", NOW, Some(100_000), None),
        Err(Error::Proto(_))
    ));
    assert!(matches!(
        client.check(b"EUR\x01", NOW, None, None),
        Err(Error::Proto(_))
    ));
    // Mode 0640, the file the socket's group may read.
    let mode = std::fs::metadata(&rig.shm).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert!(client.stats().checks > 0);
}

#[test]
fn restart_remaps_and_a_stopped_daemon_ages_into_stale() {
    let rig = market();
    let mut client = rig.client();
    let first = client.generation();
    assert_eq!(client.state(), FileState::Live);
    assert!(shm_answer(&mut client, "CHECK EURUSD", NOW).starts_with("OK "));

    // Stopped: the file stays, the quote ages.
    rig.published.as_ref().unwrap().stop();
    assert!(shm_answer(&mut client, "CHECK EURUSD", NOW).starts_with("OK "));
    assert_eq!(client.state(), FileState::Stopped);
    assert_eq!(
        shm_answer(&mut client, "CHECK EURUSD", NOW + 401 * MS),
        "REJECT EURUSD stale_quote seq=- bid=1.08512@1000000 ask=1.08515@2000000 silence_us=501000 source_age_us=551000 feeds=md1:stale_quote,md2:no_data\n"
    );
    assert_eq!(client.generation(), first, "nothing new to map");

    // A new daemon publishes at the same path: the old file is retired
    // and the client maps the new one on its next check.
    let (published, mut feeds, _gate) = publish_feeds(&rig.shm, &[("md9", settings())]);
    let q = Quote::new(sym("EURUSD"), 1, NOW as u64, side(2_000_000_000, 1), None);
    feeds[0].on_datagram(0, &packet(1, &q), NOW);
    let answer = shm_answer(&mut client, "CHECK EURUSD", NOW + 1);
    assert_ne!(client.generation(), first);
    assert_eq!(client.header().feeds[0].name, "md9");
    assert_eq!(client.stats().remaps, 1);
    assert!(answer.starts_with("OK EURUSD seq=1 bid=2@1 "), "{answer}");
    assert_eq!(
        shm_answer(&mut client, "CHECK GBPUSD", NOW + 1),
        "REJECT GBPUSD unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-\n"
    );
    drop(published);
}

#[test]
fn a_file_replaced_without_notice_is_noticed_within_a_second_of_now() {
    let rig = market();
    let mut client = rig.client();
    let first = client.generation();
    // The first check looks at the path (and starts the second).
    let _ = shm_answer(&mut client, "CHECK EURUSD", NOW);
    // Another file renamed over the path (the old one still says live).
    let other = rig.dir.path().join("other.shm");
    let (p2, _feeds, _gate) = publish_feeds(&other, &[("mdx", settings())]);
    std::fs::rename(&other, &rig.shm).unwrap();
    let _ = shm_answer(&mut client, "CHECK EURUSD", NOW + 500 * MS);
    assert_eq!(client.generation(), first, "looked at most once a second");
    let _ = shm_answer(&mut client, "CHECK EURUSD", NOW + 1001 * MS);
    assert_eq!(client.generation(), p2.generation());
}

#[test]
fn torn_or_foreign_files_are_refused_at_open() {
    let rig = market();
    let good = std::fs::read(&rig.shm).unwrap();
    let path = rig.dir.path().join("bad.shm");
    let try_open = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        Client::open(&path).map(|_| ()).unwrap_err().to_string()
    };
    let msg = try_open(&good[..good.len() - 8]);
    assert!(msg.contains("file size"), "{msg}");
    let msg = try_open(&good[..4096]);
    assert!(
        msg.contains("file_bytes") || msg.contains("file size"),
        "{msg}"
    );
    let msg = try_open(&[]);
    assert!(msg.contains("file size 0"), "{msg}");
    let mut b = good.clone();
    b[0] ^= 1;
    assert!(try_open(&b).contains("not a tickgate state file"));
    let mut b = good.clone();
    b[..8].reverse();
    assert!(try_open(&b).contains("other byte order"));
    let mut b = good.clone();
    b[8] = 99;
    assert!(try_open(&b).contains("layout version 99"));
    // A descriptor offset pointing elsewhere.
    let mut b = good.clone();
    let slots_at = (16 + 12) * 8;
    b[slots_at + 1] ^= 0x10;
    assert!(try_open(&b).contains("slots_at"));
    // A capacity not matching the file.
    let mut b = good.clone();
    b[(16 + 8) * 8] = 7;
    assert!(try_open(&b).contains("header field"));
    let msg = Client::open(rig.dir.path().join("absent.shm"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("cannot open the state file"), "{msg}");
}

/// Writes one word of the live file (as a hostile writer with write
/// access could; the client's mapping sees it at once).
fn poke(path: &std::path::Path, word: usize, value: u64) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&value.to_le_bytes(), (word * 8) as u64)
        .unwrap();
}

#[test]
fn hostile_writes_give_errors_never_a_hang_or_an_out_of_bounds_read() {
    let rig = market();
    let mut client = rig.client();
    client.set_tries(10_000);
    let place = client.header().plan.feeds[0];
    let t = place.table;
    let buckets = place.table_at + t.buckets_at;
    // A bucket is the key's words, then the tag (docs/shm-layout.md).
    let bw = table::BUCKET_WORDS;
    let tag = table::KEY_WORDS;
    // Every bucket taken by a foreign key: a lookup ends, as Corrupt.
    let saved: Vec<u64> = {
        let all = std::fs::read(&rig.shm).unwrap();
        (0..t.buckets as usize * bw)
            .map(|i| u64::from_le_bytes(all[(buckets + i) * 8..][..8].try_into().unwrap()))
            .collect()
    };
    for i in 0..t.buckets as usize {
        poke(&rig.shm, buckets + bw * i, 0xDEAD_0000 + i as u64);
        poke(&rig.shm, buckets + bw * i + tag, 1);
    }
    assert!(matches!(
        client.check(b"NOPE", NOW, None, None),
        Err(Error::Read {
            source: ReadError::Corrupt,
            ..
        })
    ));
    for (i, w) in saved.iter().enumerate() {
        poke(&rig.shm, buckets + i, *w);
    }
    assert!(client.check(b"EURUSD", NOW, None, None).unwrap().ok());
    // A bucket naming a slot beyond the capacity.
    let home = (0..t.buckets as usize)
        .find(|&i| saved[bw * i..bw * i + tag] == sym("EURUSD").words())
        .unwrap();
    poke(&rig.shm, buckets + bw * home + tag, t.capacity as u64 + 5);
    let got = client.check(b"EURUSD", NOW, None, None);
    assert!(
        matches!(
            got,
            Err(Error::Read {
                source: ReadError::Corrupt,
                ..
            })
        ),
        "{got:?}"
    );
    let mut out = Vec::new();
    assert!(client.answer(b"CHECK EURUSD", NOW, &mut out).is_err());
    assert!(out.is_empty(), "no answer line from a corrupt file");
    poke(&rig.shm, buckets + bw * home + tag, saved[bw * home + tag]);
    // A slot left mid-write (odd sequence) forever: Busy after the tries.
    let slot = saved[bw * home + tag] as usize - 1;
    let seq_word = place.table_at + t.slots_at + slot * t.stride;
    let all = std::fs::read(&rig.shm).unwrap();
    let seq = u64::from_le_bytes(all[seq_word * 8..][..8].try_into().unwrap());
    poke(&rig.shm, seq_word, seq | 1);
    assert!(matches!(
        client.check(b"EURUSD", NOW, None, None),
        Err(Error::Read {
            source: ReadError::Busy,
            ..
        })
    ));
    // The feed view cell too.
    poke(&rig.shm, seq_word, seq);
    let cell_seq = u64::from_le_bytes(all[place.cell_at * 8..][..8].try_into().unwrap());
    poke(&rig.shm, place.cell_at, cell_seq | 1);
    assert!(client.check(b"EURUSD", NOW, None, None).is_err());
    // An unknown state word makes the client look again, and keep the
    // mapping it has (the path still holds the same file).
    poke(&rig.shm, place.cell_at, cell_seq);
    poke(&rig.shm, W_STATE, 77);
    assert!(client.check(b"EURUSD", NOW, None, None).unwrap().ok());
    poke(&rig.shm, W_STATE, STATE_LIVE);
    assert_eq!(client.stats().remaps, 0);
}

#[test]
fn config_shm_defaults_next_to_the_socket_and_can_be_turned_off() {
    use std::path::PathBuf;
    use tickgate::config::Config;
    let feed = "[[feed]]\nname = \"fx\"\nmode = \"full\"\n[[feed.line]]\nname = \"A\"\ngroup = \"239.1.1.1\"\nport = 31001\ninterface = \"127.0.0.1\"\n";
    let c = Config::parse(feed).unwrap();
    assert_eq!(c.gate.shm, Some(PathBuf::from("/run/tickgate/state.shm")));
    let c = Config::parse(&format!("{feed}[gate]\nsocket = \"/tmp/x/gate.sock\"\n")).unwrap();
    assert_eq!(c.gate.shm, Some(PathBuf::from("/tmp/x/state.shm")));
    let c = Config::parse(&format!("{feed}[gate]\nshm = \"/dev/shm/tg.shm\"\n")).unwrap();
    assert_eq!(c.gate.shm, Some(PathBuf::from("/dev/shm/tg.shm")));
    let c = Config::parse(&format!("{feed}[gate]\nshm = false\n")).unwrap();
    assert_eq!(c.gate.shm, None);
    let e = Config::parse(&format!("{feed}[gate]\nshm = 3\n")).unwrap_err();
    assert!(e.to_string().contains("gate.shm"), "{e}");
}

/// A FIFO at `path`, held open for writing by the returned file: a client
/// opening it the old way (blocking, for reading) then returns and fails
/// later with another message; without a writer that open never returns.
fn fifo_with_writer(path: &std::path::Path) -> std::fs::File {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

#[test]
fn fifos_and_links_are_refused_without_blocking_at_open_and_when_followed() {
    let rig = market();
    let fifo = rig.dir.path().join("fifo.shm");
    let _w = fifo_with_writer(&fifo);
    let e = Client::open(&fifo).unwrap_err();
    assert!(matches!(e, Error::Refused { .. }), "{e}");
    assert!(
        e.to_string().contains("is a FIFO, not a regular file"),
        "{e}"
    );
    let link = rig.dir.path().join("link.shm");
    std::os::unix::fs::symlink(&rig.shm, &link).unwrap();
    let e = Client::open(&link).unwrap_err().to_string();
    assert!(e.contains("is a symbolic link"), "{e}");
    let e = Client::open(rig.dir.path()).unwrap_err().to_string();
    assert!(e.contains("is a directory"), "{e}");

    // A client already checking when the path becomes a FIFO, then a link
    // to another state file: it keeps the file it maps.
    let mut client = rig.client();
    let first = client.generation();
    assert!(client.check(b"EURUSD", NOW, None, None).unwrap().ok());
    let fifo2 = rig.dir.path().join("fifo2.shm");
    let _w2 = fifo_with_writer(&fifo2);
    std::fs::rename(&fifo2, &rig.shm).unwrap();
    assert!(client.check(b"EURUSD", NOW + 1001 * MS, None, None).is_ok());
    let other = rig.dir.path().join("other.shm");
    let (p2, _feeds, _gate) = publish_feeds(&other, &[("mdx", settings())]);
    let link2 = rig.dir.path().join("link2.shm");
    std::os::unix::fs::symlink(&other, &link2).unwrap();
    std::fs::rename(&link2, &rig.shm).unwrap();
    assert!(client.check(b"EURUSD", NOW + 2002 * MS, None, None).is_ok());
    assert_eq!(client.generation(), first);
    assert_eq!(client.stats().remaps, 0);
    // The file itself renamed into place is followed.
    std::fs::rename(&other, &rig.shm).unwrap();
    let _ = client.check(b"EURUSD", NOW + 3003 * MS, None, None);
    assert_eq!(client.generation(), p2.generation());
}

#[test]
fn check_shm_and_status_refuse_a_fifo_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("state.shm");
    let _w = fifo_with_writer(&fifo);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(["check", "EURUSD"])
        .arg(format!("--shm={}", fifo.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is a FIFO, not a regular file"), "{stderr}");
    // status: the file beside the (absent) socket.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .arg("status")
        .arg("--socket")
        .arg(dir.path().join("gate.sock"))
        .env_remove("TICKGATE_SHM")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("shared memory: not published") && stdout.contains("is a FIFO"),
        "{stdout}"
    );
}

#[test]
fn an_unknown_cause_code_in_a_slot_fails_closed() {
    let rig = market();
    let mut client = rig.client();
    let place = client.header().plan.feeds[0];
    let t = place.table;
    // EURUSD's slot: find it through the keys.
    let all = std::fs::read(&rig.shm).unwrap();
    let word = |i: usize| u64::from_le_bytes(all[i * 8..][..8].try_into().unwrap());
    let slot = (0..t.capacity as usize)
        .find(|&s| {
            let at = place.table_at + t.keys_at + s * table::KEY_WORDS;
            [word(at), word(at + 1), word(at + 2)] == sym("EURUSD").words()
        })
        .unwrap();
    // Word 8 of the slot: bits 48..56 are the cause.
    let packed = place.table_at + t.slots_at + slot * t.stride + 8;
    let old = word(packed);
    assert_eq!((old >> 48) & 0xff, 0);
    assert!(client.check(b"EURUSD", NOW, None, None).unwrap().ok());
    for cause in [8u64, 200, 255] {
        poke(&rig.shm, packed, old & !(0xff << 48) | cause << 48);
        let got = client.check(b"EURUSD", NOW, None, None);
        assert!(
            matches!(
                got,
                Err(Error::Read {
                    source: ReadError::Cause(c),
                    ..
                }) if c as u64 == cause
            ),
            "{got:?}"
        );
    }
    // The known codes keep their meaning (1: gap).
    poke(&rig.shm, packed, old & !(0xff << 48) | 1 << 48);
    let v = client.check(b"EURUSD", NOW, None, None).unwrap();
    assert_eq!(v.cause, tickgate::feed::SuspectCause::Gap);
    assert!(!v.ok());
}

const SMALL_TMPFS_ENV: &str = "TICKGATE_TEST_SMALL_TMPFS";

/// A state file larger than the free space of its tmpfs: publication
/// fails with ENOSPC and leaves nothing behind, instead of publishing a
/// sparse file whose first write past the free space is a SIGBUS. Runs in
/// a private mount namespace (`unshare -m`, as root) with a 64 KiB tmpfs.
#[test]
fn a_state_file_that_does_not_fit_its_tmpfs_is_refused_at_publication() {
    let usable = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !usable {
        println!("SKIPPED: unshare -m is not available here (needs root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "publication_in_a_small_tmpfs", "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .env(SMALL_TMPFS_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stdout.contains("SKIPPED") {
        println!("SKIPPED: cannot mount a tmpfs here: {stdout}");
        return;
    }
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}{stderr}");
}

#[test]
#[ignore = "run inside a private mount namespace by a_state_file_that_does_not_fit_its_tmpfs_is_refused_at_publication"]
fn publication_in_a_small_tmpfs() {
    let Some(dir) = std::env::var_os(SMALL_TMPFS_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        println!("SKIPPED: mount -t tmpfs failed");
        return;
    }
    let spec = |capacity| tickgate::feed::shm::FeedSpec {
        name: "md1".into(),
        capacity,
        stale_ms: 500,
        source_max_age_ms: 2000,
        units: 0,
    };
    let path = dir.join("state.shm");
    // About 1 MB: more than the file system holds.
    let e = tickgate::daemon::shm::publish(&path, 0o640, &[spec(10_000)]).unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("reserving"), "{msg}");
    assert!(msg.contains("No space left on device"), "{msg}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no file left behind"
    );
    // One that fits is published, every page allocated.
    let (p, _regions) = tickgate::daemon::shm::publish(&path, 0o640, &[spec(10)]).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        meta.blocks() * 512,
        meta.len(),
        "no page left to allocate later"
    );
    drop(p);
}

/// docs/shm-layout.md gives other languages the index hash: the one the
/// daemon uses.
#[test]
fn the_documented_hash_is_the_daemons() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/shm-layout.md"))
        .unwrap();
    let line = doc
        .lines()
        .find(|l| l.trim_start().starts_with("hash  ="))
        .expect("the hash line")
        .to_string();
    let num = |after: &str| -> u64 {
        let rest = &line[line
            .find(after)
            .unwrap_or_else(|| panic!("{after} in {line}"))
            + after.len()..];
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || *c == 'x')
            .collect();
        match digits.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => digits.parse().unwrap(),
        }
    };
    let (r1, r2, k) = (num("rotl(key1, "), num("rotl(key2, "), num(") * "));
    for s in ["EURUSD", "ESM6-ESU6", "ESM6-ESU6-ESZ6-ESH7X", "#411873"] {
        let w = sym(s).words();
        let h = w[0]
            .wrapping_add(w[1].rotate_left(r1 as u32))
            .wrapping_add(w[2].rotate_left(r2 as u32))
            .wrapping_mul(k);
        assert_eq!(h, sym(s).hash64(), "{s}");
    }
    assert_eq!(sym("EURUSD").words()[1], 0x2020_2020_2020_2020);
}

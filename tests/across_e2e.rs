//! End to end, gate.md "One symbol on several feeds": the `tickgate run`
//! daemon follows two simulated venues, `itch` and `iex`, both quoting
//! `AAPL` over loopback multicast (one line each; tickgate's own
//! protocol, written here packet by packet so that each venue's quote is
//! what the test says), and the test reads the answers from the gate
//! socket:
//! - both fresh: OK, with the best quote across the venues and `feeds=`;
//!   `feed=` picks each venue's own line;
//! - one venue stalls: REJECT `stale_quote` with `feeds=` naming it;
//! - one venue's bid above the other's offer: OK while the cross is
//!   younger than `crossed_ms`, REJECT `crossed` once it is older; a cross
//!   undone within `crossed_ms` is never `crossed`.
//!
//! Waits are bounded polls for a condition, never timing assertions; the
//! venues re-send their (unchanged) quotes every 20 ms to stay alive.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tickgate::net::receiver::realtime_ns;
use tickgate::sim::live::{McastSender, SenderOptions};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{bin, serial, terminate, PATIENCE};

/// `crossed_ms`: long enough that a cross the test just made is seen
/// young on a busy machine.
const CROSSED_MS: u64 = 1_500;

struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

impl Daemon {
    fn ask(&self, request: &str) -> String {
        daemon::ask(&self.dir.path().join("gate.sock"), request)
    }
}

/// A simulated venue: one line, one symbol, its quote re-sent on demand.
struct Venue {
    dst: SocketAddrV4,
    session: SessionId,
    seq: u64,
    bid: (i64, u64),
    ask: (i64, u64),
}

impl Venue {
    fn new(dst: SocketAddrV4, bid: (i64, u64), ask: (i64, u64)) -> Venue {
        Venue {
            dst,
            session: SessionId::parse("S1").unwrap(),
            seq: 0,
            bid,
            ask,
        }
    }

    /// Sends the current quote (a new sequence number; a quote equal to
    /// the last one changes nothing but liveness).
    fn send(&mut self, sender: &McastSender) {
        self.seq += 1;
        let side = |(px, qty): (i64, u64)| Some(Side { px, qty });
        let q = Quote::new(
            Symbol::parse("AAPL").unwrap(),
            self.seq,
            realtime_ns() as u64,
            side(self.bid),
            side(self.ask),
        );
        let mut b = PacketBuilder::new();
        b.start(self.session, self.seq).quote(&q);
        sender.send(self.dst, b.bytes()).unwrap();
    }
}

const PX: i64 = 1_000_000_000;

fn start(groups: [SocketAddrV4; 2]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tickgate.toml");
    let mut text = String::new();
    for (name, g) in ["itch", "iex"].iter().zip(groups) {
        text += &format!(
            "[[feed]]\nname = \"{name}\"\nmode = \"full\"\nstale_ms = 400\n\
             source_max_age_ms = 600000\nclock_offset = \"off\"\n\
             [[feed.line]]\nname = \"A\"\ngroup = \"{}\"\nport = {}\n\
             interface = \"127.0.0.1\"\n\n",
            g.ip(),
            g.port()
        );
    }
    text += &format!(
        "[gate]\nsocket = \"{}\"\nshm = false\nacross = \"all\"\ncrossed_ms = {CROSSED_MS}\n\
         [metrics]\nenabled = false\n",
        dir.path().join("gate.sock").display()
    );
    std::fs::write(&cfg, text).unwrap();
    let child = Command::new(bin())
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let d = Daemon { child, dir };
    daemon::wait_for_gate(&d.dir.path().join("gate.sock"));
    d
}

/// Re-sends the live venues' quotes every 20 ms and asks `CHECK AAPL`
/// after each round, until `done` holds for the answer (bounded).
fn pump_until(
    d: &Daemon,
    sender: &McastSender,
    venues: &mut [&mut Venue],
    what: &str,
    mut done: impl FnMut(&str) -> bool,
) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        for v in venues.iter_mut() {
            v.send(sender);
        }
        let a = d.ask("CHECK AAPL");
        if done(&a) {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what}; last: {a}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_venues_stall_cross_and_are_asked_one_by_one() {
    let _one = serial();
    let port = daemon::free_port();
    let groups = [
        SocketAddrV4::new(Ipv4Addr::new(239, 255, 97, 1), port),
        SocketAddrV4::new(Ipv4Addr::new(239, 255, 97, 2), port),
    ];
    let d = start(groups);
    let sender = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
    let mut itch = Venue::new(groups[0], (100 * PX, 300), (101 * PX, 200));
    let mut iex = Venue::new(groups[1], (100 * PX, 100), (1015 * PX / 10, 400));

    // Both fresh: the best bid with the sizes at it summed, the lowest
    // offer, seq=-, feeds= in config order.
    let a = pump_until(
        &d,
        &sender,
        &mut [&mut itch, &mut iex],
        "both venues OK",
        |a| a.starts_with("OK AAPL seq=- bid=100@400 ask=101@200 "),
    );
    assert!(a.ends_with(" feeds=itch:OK,iex:OK"), "{a}");
    // feed= picks each venue's own line: its seq, no feeds=.
    let one = d.ask("CHECK AAPL feed=iex");
    assert!(one.starts_with("OK AAPL seq="), "{one}");
    assert!(one.contains(" bid=100@100 ask=101.5@400 "), "{one}");
    assert!(!one.contains("feeds="), "{one}");
    let one = d.ask("CHECK AAPL feed=itch");
    assert!(one.contains(" bid=100@300 ask=101@200 "), "{one}");
    assert_eq!(d.ask("CHECK AAPL feed=arca"), "ERR unknown feed");

    // iex stalls: itch goes on, iex's quote ages past stale_ms.
    let a = pump_until(&d, &sender, &mut [&mut itch], "iex stale", |a| {
        a.starts_with("REJECT ")
    });
    assert!(a.starts_with("REJECT AAPL stale_quote seq=- "), "{a}");
    assert!(a.ends_with(" feeds=itch:OK,iex:stale_quote"), "{a}");
    assert!(d.ask("CHECK AAPL feed=itch").starts_with("OK AAPL "));
    assert!(d
        .ask("CHECK AAPL feed=iex")
        .starts_with("REJECT AAPL stale_quote "));

    // iex is back; then itch's bid goes above iex's offer and both stay:
    // OK while the cross is young, REJECT crossed once it is older than
    // crossed_ms.
    pump_until(&d, &sender, &mut [&mut itch, &mut iex], "iex back", |a| {
        a.starts_with("OK ")
    });
    itch.bid = (102 * PX, 300);
    itch.ask = (103 * PX, 200);
    let young = pump_until(&d, &sender, &mut [&mut itch, &mut iex], "the cross", |a| {
        a.contains(" bid=102@300 ")
    });
    assert!(
        young.starts_with("OK AAPL seq=- bid=102@300 ask=101.5@400 "),
        "{young}"
    );
    let held = pump_until(&d, &sender, &mut [&mut itch, &mut iex], "crossed", |a| {
        a.starts_with("REJECT ")
    });
    assert!(
        held.starts_with("REJECT AAPL crossed seq=- bid=102@300 ask=101.5@400 "),
        "{held}"
    );
    // Each venue alone is not crossed.
    assert!(d.ask("CHECK AAPL feed=itch").starts_with("OK "));
    assert!(d.ask("CHECK AAPL feed=iex").starts_with("OK "));

    // iex catches up (its offer above itch's bid): OK again.
    iex.bid = (1025 * PX / 10, 100);
    iex.ask = (1035 * PX / 10, 400);
    pump_until(&d, &sender, &mut [&mut itch, &mut iex], "uncrossed", |a| {
        a.starts_with("OK AAPL seq=- bid=102.5@100 ask=103@200 ")
    });

    // A cross undone within crossed_ms is never `crossed`: iex's bid goes
    // above itch's offer, and back within a few rounds.
    iex.bid = (1040 * PX / 10, 100);
    iex.ask = (1050 * PX / 10, 400);
    let crossing = Instant::now();
    let mut saw_crossed = false;
    pump_until(
        &d,
        &sender,
        &mut [&mut itch, &mut iex],
        "the brief cross",
        |a| {
            saw_crossed |= a.contains("crossed");
            a.contains(" bid=104@100 ")
        },
    );
    iex.bid = (1025 * PX / 10, 100);
    iex.ask = (1035 * PX / 10, 400);
    pump_until(
        &d,
        &sender,
        &mut [&mut itch, &mut iex],
        "the brief cross undone",
        |a| {
            saw_crossed |= a.contains("crossed");
            a.contains(" bid=102.5@100 ")
        },
    );
    let lasted = crossing.elapsed();
    if lasted < Duration::from_millis(CROSSED_MS) {
        assert!(!saw_crossed, "a cross of {lasted:?} answered crossed");
    } else {
        // A machine too busy to undo the cross in time proves nothing here.
        eprintln!("the brief cross lasted {lasted:?}, not under crossed_ms: that part did not run");
    }
    // Held uncrossed for longer than crossed_ms: still OK.
    let until = Instant::now() + Duration::from_millis(CROSSED_MS + 200);
    pump_until(
        &d,
        &sender,
        &mut [&mut itch, &mut iex],
        "a calm market",
        |a| {
            assert!(a.starts_with("OK "), "{a}");
            Instant::now() > until
        },
    );
}

//! Wire-to-check latency: from a datagram leaving the sender to its quote
//! being visible to a reader in another process spinning on the shared
//! state file, against a floor that does the least any receiver must.
//! `benches/wire_to_check.sh` runs the whole comparison; this binary is
//! its parts, one per process:
//!
//!   send    --proto tickgate|itch --rate R --secs S --group G:P --out F
//!           [--tick-us 50]
//!           Sends datagram n = 1..=R*S at R a second to the group on
//!           loopback, waking at most once a tick to send what is due. Datagram n carries n in its price (bid 0.0001 * n),
//!           so the reader can name it; its CLOCK_MONOTONIC stamp, taken
//!           just before the send call, is written to F (i64 per n).
//!           The datagram's own time field carries the wall clock, as a
//!           venue's would.
//!   read    --mode daemon|floor --shm PATH --n N --timeout S --out F
//!           Spins on one symbol's slot (daemon: symbol WTC of the state
//!           file's first feed; floor: the floor's slot) and writes, for
//!           every new price it sees, (n, CLOCK_MONOTONIC when first seen,
//!           when the reader last came back from a break off its CPU).
//!   floor   --proto tickgate|itch --group G:P --shm PATH [--busy] [--cpu C]
//!           [--epoll] [--timestamps] [--work-ns N]
//!           The floor receiver: one socket set up as the daemon's line
//!           socket, recvmmsg into a buffer (blocking, or spinning with
//!           --busy), and for each datagram its sequence and price written
//!           to a shared-memory slot under a seqlock. Nothing else. Runs
//!           until killed. --epoll: woken as the daemon's feed thread is
//!           (epoll_wait, then non-blocking recvmmsg until empty), to part
//!           the wake from the daemon's own work; --timestamps: the
//!           socket asks for kernel receive stamps, as the daemon's does;
//!           --work-ns: N ns of spinning before each datagram's write, a
//!           receiver's own work stood in for.
//!   analyze --stamps F --seen F [--warmup N]
//!           Joins the two files by n and prints one line: p50, p99,
//!           p99.9 and max of visible - sent (ns) over every datagram (one
//!           the receiver overwrote before the reader looked became
//!           visible with the next state the reader saw); then the same for
//!           the datagrams the reader was on its CPU for, from the send to
//!           the sight (on a shared machine the reader is sometimes
//!           preempted, and what it then sees late says nothing about the
//!           receiver).
//!
//! One clock for both processes: CLOCK_MONOTONIC (clock_gettime through
//! the vDSO), read by the sender and the reader on the same host.
//!
//! The slot both readers spin on has the same first three words: the
//! seqlock sequence, the sequence and the price (docs/shm-layout.md, a
//! symbol slot's words 0-2), so the reader's cost is the same for both.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use tickgate::client::map::Mapping;
use tickgate::feed::reader::feed_reader_in;
use tickgate::feed::shm;
use tickgate::feed::table::{WordStore, Words};
use tickgate::net::receiver::{
    open_line_socket, pin_current_thread, realtime_ns, InterfaceSpec, LineSpec,
};
use tickgate::sim::live::{McastSender, SenderOptions};
use tickgate::venue::nasdaq_itch::messages::{self as itch, Header as ItchHeader};
use tickgate::venue::nasdaq_itch::{midnight_in, new_york};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

/// The bench's symbol (one slot, so the reader spins on one cache line).
const SYMBOL: &str = "WTC";
/// Price units a datagram number is worth in the shared table (fixed
/// point x10^9): 0.0001, ITCH's tick, so both protocols give `n * SCALE`.
const SCALE: i64 = 100_000;
/// Datagrams one `recvmmsg` of the floor takes (the daemon's default).
const FLOOR_BATCH: usize = 64;
const FLOOR_BUF: usize = 2048;
/// A reader loop pass longer than this: the reader was off its CPU.
const AWAY_NS: i64 = 2_000;

fn mono_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn sleep_until_mono(t: i64) {
    let ts = libc::timespec {
        tv_sec: t / 1_000_000_000,
        tv_nsec: t % 1_000_000_000,
    };
    // SAFETY: valid timespec; a null remainder is allowed with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    Tickgate,
    Itch,
}

struct Args(Vec<String>);

impl Args {
    fn get(&self, name: &str) -> Option<&str> {
        let i = self.0.iter().position(|a| a == name)?;
        Some(
            self.0
                .get(i + 1)
                .unwrap_or_else(|| panic!("{name} needs a value")),
        )
    }
    fn need(&self, name: &str) -> &str {
        self.get(name)
            .unwrap_or_else(|| panic!("missing option {name}"))
    }
    fn num<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.get(name).map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        })
    }
    fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }
    fn proto(&self) -> Proto {
        match self.need("--proto") {
            "tickgate" => Proto::Tickgate,
            "itch" => Proto::Itch,
            p => panic!("--proto {p}: tickgate or itch"),
        }
    }
    fn group(&self) -> SocketAddrV4 {
        let g: SocketAddrV4 = self.need("--group").parse().expect("--group G:P");
        assert!(
            g.ip().is_multicast(),
            "--group: {g} is not a multicast group"
        );
        g
    }
}

fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        pin_current_thread(c).unwrap_or_else(|e| panic!("pinning to CPU {c}: {e}"));
    }
}

fn write_words(path: &str, words: impl Iterator<Item = u64>) {
    let bytes: Vec<u8> = words.flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("writing {path}: {e}"));
}

fn read_words(path: &str) -> Vec<u64> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Datagram n of the stream.
struct Frames {
    proto: Proto,
    b: PacketBuilder,
    session: SessionId,
    symbol: Symbol,
    msg: Vec<u8>,
    midnight: i64,
}

impl Frames {
    fn new(proto: Proto) -> Frames {
        let now = realtime_ns();
        Frames {
            proto,
            b: PacketBuilder::new(),
            // A new session each run: the daemon is started afresh anyway.
            session: SessionId::parse(&format!("W{:09}", (now / 1_000_000_000) % 1_000_000_000))
                .unwrap(),
            symbol: Symbol::parse(SYMBOL).unwrap(),
            msg: Vec::with_capacity(64),
            midnight: midnight_in(&new_york(), now),
        }
    }

    /// Datagram `n` (from 1), stamped with the wall clock `wall`.
    fn build(&mut self, n: u64, wall: i64) -> &[u8] {
        match self.proto {
            Proto::Tickgate => {
                // One full two-sided Quote: channel and symbol sequence n.
                let px = n as i64 * SCALE;
                let q = Quote::new(
                    self.symbol,
                    n,
                    wall as u64,
                    Some(Side { px, qty: 100 }),
                    Some(Side {
                        px: px + SCALE,
                        qty: 100,
                    }),
                );
                self.b.start(self.session, n).quote(&q);
            }
            Proto::Itch => {
                // Add Order n at price n, then Delete order n - 1: the book
                // holds one order and its best bid names the datagram.
                let header = ItchHeader {
                    locate: 1,
                    tracking: 0,
                    timestamp: (wall - self.midnight).clamp(0, itch::TIMESTAMP_MAX as i64) as u64,
                };
                self.b.start(self.session, 2 * n - 1);
                self.msg.clear();
                itch::encode(
                    &itch::Message::AddOrder {
                        header,
                        order_ref: n,
                        side: itch::Side::Buy,
                        shares: 100,
                        stock: self.symbol,
                        price: u32::try_from(n).expect("datagram number fits an ITCH price"),
                        attribution: None,
                    },
                    &mut self.msg,
                );
                self.b.push_raw(&self.msg);
                self.msg.clear();
                itch::encode(
                    &itch::Message::Delete {
                        header,
                        order_ref: n - 1,
                    },
                    &mut self.msg,
                );
                self.b.push_raw(&self.msg);
            }
        }
        self.b.bytes()
    }
}

/// The price field of a datagram as the shared table would hold it
/// (x10^9), read at a fixed offset: the floor validates nothing.
#[inline(always)]
fn floor_price(proto: Proto, d: &[u8]) -> u64 {
    match proto {
        // MoldUDP64 header 20, block length 2, the Quote's bid_px at 26.
        Proto::Tickgate => d
            .get(48..56)
            .map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap())),
        // The Add Order's price (u32, 4 decimals) at 32 of the first block.
        Proto::Itch => d.get(54..58).map_or(0, |b| {
            u32::from_be_bytes(b.try_into().unwrap()) as u64 * SCALE as u64
        }),
    }
}

fn send(a: &Args) {
    let proto = a.proto();
    let rate: u64 = a.num("--rate").expect("--rate");
    let secs: f64 = a.num("--secs").unwrap_or(3.0);
    let group = a.group();
    let out = a.need("--out");
    pin(a.num("--cpu"));
    // Wake from each pacing sleep on time (the default slack is 50 us).
    // SAFETY: plain prctl on this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let total = (rate as f64 * secs) as u64;
    let mut stamps = vec![0i64; total as usize];
    let mut frames = Frames::new(proto);
    let sender = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).expect("sender");
    // Wake at most once a tick and send what is due, each datagram on its
    // own (and stamped on its own): a wake costs this VM several
    // microseconds of timer work, too much to take per datagram.
    let tick = (a.num::<f64>("--tick-us").unwrap_or(50.0) * 1e3) as i64;
    let start = mono_ns() + 20_000_000;
    let mut late_max = 0i64;
    let mut errors = 0u64;
    let mut woke = 0i64;
    for n in 1..=total {
        let due = start + (n as u128 * 1_000_000_000 / rate as u128) as i64;
        if mono_ns() < due {
            woke = due.max(woke + tick);
            sleep_until_mono(woke);
        }
        let d = frames.build(n, realtime_ns());
        let t = mono_ns();
        if sender.send(group, d).is_err() {
            errors += 1;
        }
        stamps[(n - 1) as usize] = t;
        late_max = late_max.max(t - due);
    }
    let span = stamps[stamps.len() - 1] - stamps[0];
    write_words(out, stamps.iter().map(|&t| t as u64));
    println!(
        "sent {total} in {:.3} s: {:.0}/s (target {rate}/s), latest {:.1} us behind schedule, {errors} send errors",
        span as f64 / 1e9,
        (total - 1) as f64 * 1e9 / span.max(1) as f64,
        late_max as f64 / 1e3
    );
}

/// The mapped file and the word index of the slot's seqlock word.
fn open_slot(mode: &str, path: &str, timeout_ns: i64) -> (Arc<Mapping>, usize) {
    let deadline = mono_ns() + timeout_ns;
    loop {
        if let Some(found) = try_open_slot(mode, path) {
            return found;
        }
        assert!(mono_ns() < deadline, "no slot to read in {path} in time");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn try_open_slot(mode: &str, path: &str) -> Option<(Arc<Mapping>, usize)> {
    let file = std::fs::File::open(path).ok()?;
    let map = Arc::new(Mapping::read_only(&file).ok()?);
    match mode {
        "floor" => Some((map, 0)),
        "daemon" => {
            let header = shm::parse_header(map.words()).ok()?;
            let (spec, place) = (header.feeds.first()?, header.plan.feeds.first()?);
            let all = Words::shared(map.clone());
            let cell = all.range(place.cell_at, place.table_at - place.cell_at)?;
            let table = all.range(place.table_at, place.table.words)?;
            let units = all.range(place.units_at, place.units.words)?;
            let reader =
                feed_reader_in(spec.capacity, &cell, &table, place.units.units, &units).ok()?;
            let symbol = Symbol::parse(SYMBOL).unwrap();
            let slot =
                (0..reader.len()).find(|&s| reader.slot(s).is_some_and(|(k, _)| k == symbol))?;
            let at = place.table_at + place.table.slots_at + place.table.stride * slot as usize;
            Some((map, at))
        }
        m => panic!("--mode {m}: daemon or floor"),
    }
}

fn read(a: &Args) {
    let mode = a.need("--mode");
    let path = a.need("--shm");
    let n_last: u64 = a.num("--n").expect("--n");
    let timeout_ns = (a.num::<f64>("--timeout").unwrap_or(30.0) * 1e9) as i64;
    let out = a.need("--out");
    pin(a.num("--cpu"));
    let (map, at) = open_slot(mode, path, timeout_ns);
    let w = &map.words()[at..at + 3];
    // Touched now, so that recording never faults a page in.
    let mut seen: Vec<[u64; 3]> = vec![[0; 3]; n_last as usize + 1];
    seen.clear();
    let deadline = mono_ns() + timeout_ns;
    let (mut last_s, mut last_n) = (u64::MAX, 0u64);
    let mut torn = 0u64;
    // When this reader was last off its CPU (a loop pass longer than
    // AWAY_NS): an update seen after such a gap may have been visible
    // earlier, so `analyze` can leave out the ones the reader was away for.
    let (mut last_t, mut back_at, mut away_ns, mut aways) = (mono_ns(), 0i64, 0i64, 0u64);
    let started = last_t;
    loop {
        let s1 = w[0].load(Ordering::Acquire);
        let mut px = 0;
        let fresh = s1 != last_s && s1 & 1 == 0 && {
            px = w[2].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let s2 = w[0].load(Ordering::Relaxed);
            torn += (s1 != s2) as u64;
            s1 == s2
        };
        let t = mono_ns();
        if t - last_t > AWAY_NS {
            back_at = t;
            away_ns += t - last_t;
            aways += 1;
        }
        last_t = t;
        if fresh {
            last_s = s1;
            let n = px / SCALE as u64;
            if n > last_n && n <= n_last {
                seen.push([n, t as u64, back_at as u64]);
                last_n = n;
                if n == n_last {
                    break;
                }
            }
        }
        if t > deadline {
            break;
        }
        std::hint::spin_loop();
    }
    write_words(out, seen.iter().flatten().copied());
    println!(
        "read {} updates, last {last_n} of {n_last}, {torn} torn reads retried; away {aways} times, {:.2}% of the time",
        seen.len(),
        away_ns as f64 * 100.0 / (last_t - started).max(1) as f64
    );
}

/// The floor's shared slot: words 0-2 as a symbol slot's (seqlock
/// sequence, sequence, price), alone on their page.
struct FloorSlot(Mapping);

impl FloorSlot {
    #[inline(always)]
    fn write(&self, seq: u64, price: u64) {
        let w = self.0.words();
        // docs/shm-layout.md "Seqlock read protocol", writer side.
        let s = w[0].load(Ordering::Relaxed);
        w[0].store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        w[1].store(seq, Ordering::Relaxed);
        w[2].store(price, Ordering::Relaxed);
        w[0].store(s + 2, Ordering::Release);
    }
}

fn floor(a: &Args) {
    let proto = a.proto();
    let group = a.group();
    let path = a.need("--shm");
    let busy = a.flag("--busy");
    pin(a.num("--cpu"));
    // The line socket exactly as the daemon opens it (bind, join, 8 MiB
    // SO_RCVBUF), without kernel timestamps: the floor reads no clock.
    let line = LineSpec::new("A", group, InterfaceSpec::Addr(Ipv4Addr::LOCALHOST));
    let sock = open_line_socket(&line, a.flag("--timestamps")).expect("floor socket");
    if !busy {
        sock.set_nonblocking(false).expect("blocking socket");
    }
    let tmp = format!("{path}.tmp");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .expect("floor slot file");
    let slot = FloorSlot(Mapping::create(&file, 4096).expect("mapping the floor slot"));
    std::fs::rename(&tmp, path).expect("publishing the floor slot");
    let mut bufs = vec![[0u8; FLOOR_BUF]; FLOOR_BATCH];
    // SAFETY: plain data, all-zero is valid.
    let mut iov: Vec<libc::iovec> = vec![unsafe { std::mem::zeroed() }; FLOOR_BATCH];
    let mut hdrs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; FLOOR_BATCH];
    for i in 0..FLOOR_BATCH {
        iov[i].iov_base = bufs[i].as_mut_ptr().cast();
        iov[i].iov_len = FLOOR_BUF;
        hdrs[i].msg_hdr.msg_iov = &mut iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    let flags = if busy {
        libc::MSG_DONTWAIT
    } else {
        libc::MSG_WAITFORONE
    };
    let fd = sock.as_raw_fd();
    println!(
        "floor receiving on {group} ({})",
        if busy { "spinning" } else { "blocking" }
    );
    let work_ns: i64 = a.num("--work-ns").unwrap_or(0);
    if a.flag("--epoll") {
        floor_epoll(proto, &sock, &slot, &mut hdrs, &bufs, work_ns);
    }
    loop {
        // SAFETY: hdrs point at iov and bufs, which outlive the call.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                FLOOR_BATCH as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if got <= 0 {
            std::hint::spin_loop();
            continue;
        }
        floor_write(proto, &slot, &hdrs[..got as usize], &bufs, work_ns);
    }
}

/// The floor woken as the daemon's feed thread is: `epoll_wait`, then
/// non-blocking `recvmmsg` until the socket is empty.
fn floor_epoll(
    proto: Proto,
    sock: &socket2::Socket,
    slot: &FloorSlot,
    hdrs: &mut [libc::mmsghdr],
    bufs: &[[u8; FLOOR_BUF]],
    work_ns: i64,
) -> ! {
    sock.set_nonblocking(true).expect("non-blocking socket");
    let fd = sock.as_raw_fd();
    // SAFETY: plain epoll calls on descriptors this function owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    assert_eq!(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) },
        0
    );
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
    loop {
        // SAFETY: events has room for 4.
        unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 4, 100) };
        loop {
            // SAFETY: hdrs point at iov and bufs, which outlive the call.
            let got = unsafe {
                libc::recvmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    hdrs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if got <= 0 {
                break;
            }
            floor_write(proto, slot, &hdrs[..got as usize], bufs, work_ns);
        }
    }
}

/// The floor's whole work for the datagrams read: each one's sequence and
/// price into the slot, after `work_ns` of stand-in work.
#[inline]
fn floor_write(
    proto: Proto,
    slot: &FloorSlot,
    read: &[libc::mmsghdr],
    bufs: &[[u8; FLOOR_BUF]],
    work_ns: i64,
) {
    for (h, b) in read.iter().zip(bufs) {
        spin_for(work_ns);
        let d = &b[..h.msg_len as usize];
        let seq = d
            .get(10..18)
            .map_or(0, |s| u64::from_be_bytes(s.try_into().unwrap()));
        slot.write(seq, floor_price(proto, d));
    }
}

/// `--work-ns`: a receiver's own work per datagram, stood in for by
/// spinning on the clock (0: none, no clock read).
#[inline]
fn spin_for(ns: i64) {
    if ns > 0 {
        let until = realtime_ns() + ns;
        while realtime_ns() < until {
            std::hint::spin_loop();
        }
    }
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn analyze(a: &Args) {
    let stamps = read_words(a.need("--stamps"));
    let seen = read_words(a.need("--seen"));
    let warmup: u64 = a.num("--warmup").unwrap_or(0);
    let (mut all, mut present) = (Vec::new(), Vec::new());
    let mut seen_n = 0usize;
    let mut prev = warmup;
    for r in seen.chunks_exact(3) {
        let (n, t, back_at) = (r[0], r[1] as i64, r[2] as i64);
        if n <= prev || n as usize > stamps.len() {
            continue;
        }
        seen_n += 1;
        // Datagrams prev+1..n-1 were overwritten before the reader looked:
        // the state it saw at `t` is the first that holds them, so `t` is
        // when each became visible. Every datagram counts, whichever the
        // receiver's batching let the reader see on its own.
        for k in prev + 1..=n {
            let sent = stamps[k as usize - 1] as i64;
            all.push(t - sent);
            // The reader ran without a break from this send to the sight.
            if back_at < sent {
                present.push(t - sent);
            }
        }
        prev = n;
    }
    let measured = stamps.len() as u64 - warmup.min(stamps.len() as u64);
    // No update at all (a receiver that fell behind for the whole run)
    // prints -1 for its figures.
    let seen_all = all.len();
    let seen_present = present.len();
    for v in [&mut all, &mut present] {
        v.sort_unstable();
        if v.is_empty() {
            v.push(-1);
        }
    }
    // Every datagram sent after the warm-up: p50 p99 p99.9 max (ns) of
    // send to visible, how many became visible, how many were sent; the
    // same four and the count for those the reader was on its CPU for from
    // the send to the sight; how many states the reader saw.
    println!(
        "{} {} {} {} {} {} {} {} {} {} {} {}",
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        percentile(&all, 0.999),
        all[all.len() - 1],
        seen_all,
        measured,
        percentile(&present, 0.5),
        percentile(&present, 0.99),
        percentile(&present, 0.999),
        present[present.len() - 1],
        seen_present,
        seen_n,
    );
}

fn main() {
    // `cargo bench` passes --bench; the subcommand is the first other word.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(cmd) = args.first().cloned() else {
        eprintln!(
            "usage: wire_to_check send|read|floor|analyze ... (see benches/wire_to_check.rs)"
        );
        return;
    };
    let a = Args(args);
    match cmd.as_str() {
        "send" => send(&a),
        "read" => read(&a),
        "floor" => floor(&a),
        "analyze" => analyze(&a),
        c => panic!("unknown subcommand {c}"),
    }
}

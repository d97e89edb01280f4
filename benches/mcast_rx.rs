//! Largest lossless multicast receive rate on loopback, decode and state
//! update included, and the resident memory of a receiver + Feed with
//! 100,000 symbols.
//!
//! `cargo bench --bench mcast_rx -- [options]`:
//!   --rates 200000,400000,...   datagrams/s to step through
//!   --secs 3                    seconds per step
//!   --rx-cpu 0 --tx-cpu 1       pinning of the feed thread and the sender
//!   --rcvbuf 4194304            SO_RCVBUF per line (bytes)
//!   --busy-poll                 spin instead of epoll
//!   --batch 64                  recvmmsg batch
//!   --max-datagram 1536         receive buffer per datagram
//!   --fifo PRIO                 receiver and sender threads SCHED_FIFO
//!                               (run sockperf under `chrt -f PRIO` to match)
//!   --no-feed                   only `Packet::parse`, no Feed
//!   --no-kernel-ts              arrival from one clock read per batch
//!   --no-prefetch               do not pass the receiver's prefetch
//!                               hints on to the Feed (for comparison)
//!   --mem                       only the memory measurement
//!   --serve                     receive on the bench group until SIGTERM
//!                               (after the warm-up), then print counts
//!   --send N --first K          send datagrams K..K+N-1 at the first rate
//!   --port P                    the bench group's port (default 47900)
//!   --sockperf-udp-drops PORT   print the kernel's drop count of the
//!                               socket bound to PORT (for sockperf runs)
//!
//! Every datagram is one MoldUDP64 packet with one Quote (80 bytes); the
//! Quotes cycle over 100,000 symbols. Loss is counted three ways: channel
//! sequence numbers (sent - received), the socket's SO_RXQ_OVFL counter,
//! and /proc/net/snmp Udp RcvbufErrors/InErrors (host-wide, so other
//! traffic on the host can add to them).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickgate::feed::reader::{self, TablePublisher};
use tickgate::feed::settings::FeedSettings;
use tickgate::feed::Feed;
use tickgate::net::receiver::{
    realtime_ns, set_fifo_priority, DatagramHandler, FeedThread, InterfaceSpec, LineSpec,
    LineStatsSnapshot, ReceiverOptions,
};
use tickgate::sim::live::{send_paced, McastSender, Pace, SenderOptions};
use tickgate::wire::{Packet, PacketBuilder, Quote, SessionId, Side, Symbol};

const SYMBOLS: usize = 100_000;
const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 200), 47900);
const LEN: usize = 80;

struct Opts {
    rates: Vec<u64>,
    secs: f64,
    rx_cpu: Option<usize>,
    tx_cpu: Option<usize>,
    rcvbuf: usize,
    busy_poll: bool,
    batch: usize,
    max_datagram: usize,
    feed: bool,
    kernel_ts: bool,
    prefetch: bool,
    mem: bool,
    sockperf_port: Option<u16>,
    fifo: Option<i32>,
    serve: bool,
    /// `--send N --first K`: send datagrams K..K+N at `--rates` (first).
    send: Option<u64>,
    first: u64,
    port: u16,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        rates: vec![200_000, 400_000, 600_000, 750_000, 900_000],
        secs: 3.0,
        rx_cpu: Some(0),
        tx_cpu: Some(1),
        rcvbuf: 4 << 20,
        busy_poll: false,
        batch: 64,
        max_datagram: ReceiverOptions::default().max_datagram,
        feed: true,
        kernel_ts: true,
        prefetch: true,
        mem: false,
        sockperf_port: None,
        fifo: None,
        serve: false,
        send: None,
        first: 1,
        port: GROUP.port(),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let val = |i: &mut usize| -> String {
        *i += 1;
        args.get(*i).cloned().expect("option needs a value")
    };
    while i < args.len() {
        match args[i].as_str() {
            "--rates" => {
                o.rates = val(&mut i)
                    .split(',')
                    .map(|r| r.trim().parse().expect("rate"))
                    .collect()
            }
            "--secs" => o.secs = val(&mut i).parse().expect("secs"),
            "--rx-cpu" => o.rx_cpu = Some(val(&mut i).parse().expect("cpu")),
            "--tx-cpu" => o.tx_cpu = Some(val(&mut i).parse().expect("cpu")),
            "--no-pin" => (o.rx_cpu, o.tx_cpu) = (None, None),
            "--rcvbuf" => o.rcvbuf = val(&mut i).parse().expect("rcvbuf"),
            "--batch" => o.batch = val(&mut i).parse().expect("batch"),
            "--max-datagram" => o.max_datagram = val(&mut i).parse().expect("bytes"),
            "--busy-poll" => o.busy_poll = true,
            "--no-feed" => o.feed = false,
            "--no-kernel-ts" => o.kernel_ts = false,
            "--no-prefetch" => o.prefetch = false,
            "--serve" => o.serve = true,
            "--send" => o.send = Some(val(&mut i).parse().expect("count")),
            "--first" => o.first = val(&mut i).parse().expect("first"),
            "--port" => o.port = val(&mut i).parse().expect("port"),
            "--fifo" => o.fifo = Some(val(&mut i).parse().expect("priority")),
            "--mem" => o.mem = true,
            "--sockperf-udp-drops" => o.sockperf_port = Some(val(&mut i).parse().expect("port")),
            "--bench" => {}
            other => panic!("unknown option {other}"),
        }
        i += 1;
    }
    o
}

fn symbols() -> Vec<Symbol> {
    (0..SYMBOLS)
        .map(|i| Symbol::parse(&format!("B{i:06}")).unwrap())
        .collect()
}

/// Datagram number `n` (1-based channel sequence): a Quote of symbol
/// `(n-1) % SYMBOLS` with that symbol's next sequence number.
struct Gen {
    template: [u8; LEN],
    syms: Vec<Symbol>,
}

impl Gen {
    fn new() -> Gen {
        let mut b = PacketBuilder::new();
        let q = Quote::new(
            Symbol::parse("X").unwrap(),
            1,
            0,
            Some(Side {
                px: 1_085_120_000,
                qty: 1_000_000,
            }),
            Some(Side {
                px: 1_085_130_000,
                qty: 2_000_000,
            }),
        );
        b.start(SessionId::parse("BENCH").unwrap(), 1).quote(&q);
        Gen {
            template: b.bytes().try_into().expect("80-byte packet"),
            syms: symbols(),
        }
    }

    fn packet(&self, n: u64, source_ts: i64) -> [u8; LEN] {
        let mut p = self.template;
        let k = (n - 1) as usize % SYMBOLS;
        let sym_seq = (n - 1) / SYMBOLS as u64 + 1;
        p[10..18].copy_from_slice(&n.to_be_bytes());
        // Block: length at 20, payload at 22: type, flags, symbol, seq, ts.
        p[24..32].copy_from_slice(&self.syms[k].wire());
        p[32..40].copy_from_slice(&sym_seq.to_be_bytes());
        p[40..48].copy_from_slice(&(source_ts as u64).to_be_bytes());
        p
    }
}

/// The Feed publishing into the lock-free state table the gate reads,
/// with the daemon's own publisher (`feed::reader`).
fn new_feed(lines: usize) -> Feed<TablePublisher> {
    let (publisher, _reader) = reader::with_capacity(SYMBOLS as u32);
    Feed::with_publisher(FeedSettings::default(), lines, publisher)
}

/// The receive side: the core's Feed (or only the parser) plus a loss
/// count from the channel sequence numbers.
struct Sink {
    prefetch: bool,
    feed: Option<Feed<TablePublisher>>,
    parsed: u64,
    received: u64,
    next_seq: u64,
    seq_gaps: Arc<AtomicU64>,
    /// CPU time of the feed thread (ns), updated after each poll round.
    cpu_ns: Arc<AtomicU64>,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl DatagramHandler for Sink {
    fn on_poll(&mut self, _now: i64) {
        self.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }

    #[inline]
    fn prefetch(&mut self, d: &[u8]) {
        if let Some(f) = self.feed.as_ref().filter(|_| self.prefetch) {
            f.prefetch_state(d);
        }
    }

    #[inline]
    fn prefetch_early(&mut self, d: &[u8]) {
        if let Some(f) = self.feed.as_ref().filter(|_| self.prefetch) {
            f.prefetch_index(d);
        }
    }

    fn on_datagram(&mut self, line: usize, d: &[u8], now: i64) {
        self.received += 1;
        if d.len() >= 18 {
            let seq = u64::from_be_bytes(d[10..18].try_into().unwrap());
            if self.next_seq != 0 && seq > self.next_seq {
                self.seq_gaps
                    .fetch_add(seq - self.next_seq, Ordering::Relaxed);
            }
            self.next_seq = self.next_seq.max(seq + 1);
        }
        match &mut self.feed {
            Some(f) => {
                f.on_datagram(line, d, now);
            }
            None => {
                if Packet::parse(d).is_ok() {
                    self.parsed += 1;
                }
            }
        }
    }
}

fn snmp_udp() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let lines: Vec<&str> = s.lines().filter(|l| l.starts_with("Udp:")).collect();
    if lines.len() < 2 {
        return (0, 0);
    }
    let names: Vec<&str> = lines[0].split_whitespace().collect();
    let vals: Vec<u64> = lines[1]
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let get = |n: &str| {
        names
            .iter()
            .skip(1)
            .position(|x| *x == n)
            .map_or(0, |i| vals[i])
    };
    (get("RcvbufErrors"), get("InErrors"))
}

/// The `drops` column of /proc/net/udp for sockets bound to `port`.
fn udp_socket_drops(port: u16) -> u64 {
    let s = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let want = format!(":{port:04X}");
    s.lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.ends_with(&want))
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

fn vm_status(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn pin(cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        // SAFETY: plain data set and syscall on the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

fn line(group: SocketAddrV4, rcvbuf: usize) -> LineSpec {
    LineSpec {
        rcvbuf: Some(rcvbuf),
        ..LineSpec::new("A", group, InterfaceSpec::Addr(Ipv4Addr::LOCALHOST))
    }
}

struct Step {
    /// Feed-thread CPU time per datagram received (recvmmsg, decode, rules,
    /// table publish): what bounds the rate on an idle core.
    rx_ns_per_datagram: f64,
    /// Datagrams per recvmmsg call.
    per_batch: f64,
    rate: u64,
    sent: u64,
    send_rate: f64,
    received: u64,
    seq_loss: u64,
    ovfl: u64,
    rcvbuf_err: u64,
    in_err: u64,
}

/// One receiver + Feed for the whole run, as in the daemon: the steps
/// continue one channel sequence, and the 100,000 symbols are populated
/// before the first step (warm-up), so every step measures steady state.
struct Bench {
    group: SocketAddrV4,
    rx: FeedThread<Sink>,
    gaps: Arc<AtomicU64>,
    cpu: Arc<AtomicU64>,
    next_n: u64,
}

impl Bench {
    fn start(o: &Opts, gen: &Gen, group: SocketAddrV4) -> Bench {
        let gaps = Arc::new(AtomicU64::new(0));
        let cpu = Arc::new(AtomicU64::new(0));
        let sink = Sink {
            prefetch: o.prefetch,
            feed: o.feed.then(|| new_feed(1)),
            parsed: 0,
            received: 0,
            next_seq: 0,
            seq_gaps: gaps.clone(),
            cpu_ns: cpu.clone(),
        };
        let rx = FeedThread::spawn(
            "bench",
            &[line(group, o.rcvbuf)],
            ReceiverOptions {
                batch: o.batch,
                max_datagram: o.max_datagram,
                busy_poll: o.busy_poll,
                cpu: o.rx_cpu,
                kernel_timestamps: o.kernel_ts,
                fifo_priority: o.fifo,
                ..ReceiverOptions::default()
            },
            sink,
        )
        .expect("receiver");
        let mut b = Bench {
            group,
            rx,
            gaps,
            cpu,
            next_n: 1,
        };
        // Warm-up: every symbol once, slowly enough to lose nothing.
        let w = b.step(o, gen, 100_000, SYMBOLS as u64);
        eprintln!("warm-up: {} datagrams sent, {} lost", w.sent, w.seq_loss);
        b
    }

    fn step(&mut self, o: &Opts, gen: &Gen, rate: u64, n: u64) -> Step {
        let stats = self.rx.stats();
        let before = stats[0].snapshot();
        let gaps0 = self.gaps.load(Ordering::Relaxed);
        let cpu0 = self.cpu.load(Ordering::Relaxed);
        let (rb0, ie0) = snmp_udp();
        let first = self.next_n;
        let (tx_cpu, fifo, group) = (o.tx_cpu, o.fifo, self.group);
        let sent = std::thread::scope(|s| {
            s.spawn(|| {
                pin(tx_cpu);
                if let Some(p) = fifo {
                    set_fifo_priority(p).expect("SCHED_FIFO for the sender");
                }
                let mut tx = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
                let ts = realtime_ns();
                let items = (first..first + n).map(|i| (0i64, group, gen.packet(i, ts)));
                send_paced(
                    &mut tx,
                    items,
                    Pace::Rate {
                        per_sec: rate as f64,
                    },
                    &AtomicBool::new(false),
                    None,
                )
                .unwrap()
            })
            .join()
            .unwrap()
        });
        self.next_n += sent.datagrams;
        // Let the receiver drain what is queued.
        let start = Instant::now();
        let arrived = |b: &LineStatsSnapshot| {
            stats[0].snapshot().datagrams - b.datagrams + stats[0].snapshot().kernel_drops
                - b.kernel_drops
        };
        while arrived(&before) < sent.datagrams && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50));
        let (rb1, ie1) = snmp_udp();
        let after = stats[0].snapshot();
        let received = after.datagrams - before.datagrams;
        let cpu = self.cpu.load(Ordering::Relaxed) - cpu0;
        Step {
            rx_ns_per_datagram: cpu as f64 / received.max(1) as f64,
            per_batch: received as f64 / (after.batches - before.batches).max(1) as f64,
            rate,
            sent: sent.datagrams,
            send_rate: sent.rate(),
            received,
            // Gaps the receiver saw, plus any tail that never arrived.
            seq_loss: (self.gaps.load(Ordering::Relaxed) - gaps0)
                .max(sent.datagrams.saturating_sub(received)),
            ovfl: after.kernel_drops - before.kernel_drops,
            rcvbuf_err: rb1 - rb0,
            in_err: ie1 - ie0,
        }
    }

    fn stop(self) {
        let sink = self.rx.stop().expect("receiver thread");
        match &sink.feed {
            // Every datagram went through the rules (none invalid).
            Some(f) => {
                assert_eq!(f.counters().packets(), sink.received);
                assert_eq!(f.counters().invalid_packets, 0);
                eprintln!(
                    "feed: {} symbols, {} packets",
                    f.symbol_count(),
                    sink.received
                );
            }
            None => assert_eq!(sink.parsed, sink.received),
        }
    }
}

fn memory(o: &Opts) {
    let base_rss = vm_status("VmRSS:");
    let gen = Gen::new();
    let sink = Sink {
        prefetch: o.prefetch,
        feed: Some(new_feed(2)),
        parsed: 0,
        received: 0,
        next_seq: 0,
        seq_gaps: Arc::new(AtomicU64::new(0)),
        cpu_ns: Arc::new(AtomicU64::new(0)),
    };
    let l = line(GROUP, o.rcvbuf);
    let rx = FeedThread::spawn("mem", &[l], ReceiverOptions::default(), sink).unwrap();
    let stats = rx.stats();
    let mut tx = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
    let ts = realtime_ns();
    let items = (1..=SYMBOLS as u64).map(|i| (0i64, GROUP, gen.packet(i, ts)));
    send_paced(
        &mut tx,
        items,
        Pace::Rate { per_sec: 100_000.0 },
        &AtomicBool::new(false),
        None,
    )
    .unwrap();
    let start = Instant::now();
    while stats[0].snapshot().datagrams < SYMBOLS as u64 && start.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rss = vm_status("VmRSS:");
    let hwm = vm_status("VmHWM:");
    let sink = rx.stop().unwrap();
    let f = sink.feed.as_ref().unwrap();
    assert_eq!(f.publisher().symbols().len() as usize, f.symbol_count());
    println!(
        "memory: {} symbols populated and published to the table (received {}), VmRSS {} KiB ({:.1} MiB), VmHWM {} KiB, before receiver+Feed {} KiB",
        f.symbol_count(),
        sink.received,
        rss,
        rss as f64 / 1024.0,
        hwm,
        base_rss
    );
}

fn main() {
    let o = parse_opts();
    if let Some(port) = o.sockperf_port {
        let (rb, ie) = snmp_udp();
        println!(
            "socket drops on port {port}: {}; host Udp RcvbufErrors {rb} InErrors {ie}",
            udp_socket_drops(port)
        );
        return;
    }
    if o.mem {
        memory(&o);
        return;
    }
    let gen = Gen::new();
    let group = SocketAddrV4::new(*GROUP.ip(), o.port);
    if let Some(n) = o.send {
        pin(o.tx_cpu);
        if let Some(p) = o.fifo {
            set_fifo_priority(p).expect("SCHED_FIFO");
        }
        let mut tx = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
        let ts = realtime_ns();
        let items = (o.first..o.first + n).map(|i| (0i64, group, gen.packet(i, ts)));
        let rate = o.rates[0] as f64;
        let st = send_paced(
            &mut tx,
            items,
            Pace::Rate { per_sec: rate },
            &AtomicBool::new(false),
            None,
        )
        .unwrap();
        println!("sent {}", st.datagrams);
        return;
    }
    if o.serve {
        // The receiver as its own process, so that a script can stop it
        // (SIGSTOP), fill its socket and time the drain exactly like
        // sockperf's server.
        let stop = tickgate::util::signals::stop_on_signals();
        let bench = Bench::start(&o, &gen, group);
        println!("ready {} next {}", std::process::id(), bench.next_n);
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let st = bench.rx.stats()[0].snapshot();
        println!(
            "received {} kernel drops {} seq gaps {} batches {}",
            st.datagrams,
            st.kernel_drops,
            bench.gaps.load(Ordering::Relaxed),
            st.batches
        );
        bench.stop();
        return;
    }
    println!(
        "multicast receive on loopback: {}-byte datagrams, {} s per step, batch {}, rcvbuf {}, {}, {}, {} timestamps, rx cpu {:?}, tx cpu {:?}, SCHED_FIFO {:?}",
        LEN,
        o.secs,
        o.batch,
        o.rcvbuf,
        if o.busy_poll { "busy-poll" } else { "epoll" },
        if o.feed { "Feed (decode + state update + table publish)" } else { "Packet::parse only" },
        if o.kernel_ts { "kernel" } else { "per-batch clock" },
        o.rx_cpu,
        o.tx_cpu,
        o.fifo
    );
    println!(
        "| target/s | sent | achieved/s | received | lost (seq) | SO_RXQ_OVFL | RcvbufErrors | InErrors | rx CPU ns/datagram | datagrams/recvmmsg |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut bench = Bench::start(&o, &gen, group);
    for &rate in &o.rates {
        let s = bench.step(&o, &gen, rate, (rate as f64 * o.secs) as u64);
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {:.0} | {:.1} |",
            s.rate,
            s.sent,
            s.send_rate,
            s.received,
            s.seq_loss,
            s.ovfl,
            s.rcvbuf_err,
            s.in_err,
            s.rx_ns_per_datagram,
            s.per_batch
        );
    }
    bench.stop();
}

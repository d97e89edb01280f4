//! The live receiver of one feed (I/O shell, Linux only).
//!
//! One thread per feed reads every line (A, B, ...) of that feed and hands
//! each datagram to a single handler (the core's `Feed`), so A/B
//! arbitration runs in one writer thread without locks. Per line: a UDP
//! socket bound to `group:port` (so the kernel filters by destination), the
//! group joined on the configured interface (source-specific when a source
//! is given), a large receive buffer, kernel receive timestamps
//! (`SO_TIMESTAMPNS`, live before `Receiver::open` returns) as the arrival
//! time and the kernel's drop counter (`SO_RXQ_OVFL`). Datagrams are read
//! in batches with `recvmmsg` into buffers allocated once: nothing is
//! allocated per packet.
//!
//! Lines are delivered merged by kernel arrival time, across batches: what
//! arrived after the latest datagram read from a line that may have more
//! queued is held back until that line is read again. So the copy of a
//! packet that arrived first is the one applied, and a packet lost on one
//! line is taken from the other before a later packet can open a channel
//! gap (semantics.md C2/C3).
//!
//! Blocking mode waits in `epoll_wait` with a 100 ms timeout so that the
//! stop flag is seen promptly; busy-poll mode spins over the sockets with
//! non-blocking `recvmmsg` (lowest latency, burns its core: pin it).

use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::net::rerequest::{Received, RerequestSocket};
use crate::venue::rerequest::REQUEST_LEN;

/// The epoll token of the re-request socket (lines are 0..n).
const REREQUEST_TOKEN: u64 = u64::MAX;

/// Where a line is received: an interface name (`lo`, `eth0`), resolved
/// to its IPv4 address, or the address itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterfaceSpec {
    Name(String),
    Addr(Ipv4Addr),
}

impl InterfaceSpec {
    /// The interface's IPv4 address (the first one, for a name).
    pub fn resolve(&self) -> anyhow::Result<Ipv4Addr> {
        match self {
            InterfaceSpec::Addr(a) => Ok(*a),
            InterfaceSpec::Name(name) => interface_ipv4(name)
                .with_context(|| format!("looking up interface {name:?}"))?
                .with_context(|| format!("no interface {name:?} with an IPv4 address")),
        }
    }
}

impl FromStr for InterfaceSpec {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<InterfaceSpec> {
        if let Ok(a) = s.parse::<Ipv4Addr>() {
            return Ok(InterfaceSpec::Addr(a));
        }
        // IFNAMSIZ is 16 with the terminating NUL.
        if s.is_empty() || s.len() > 15 || s.contains(['/', ' ', '\0']) {
            bail!("{s:?} is neither an IPv4 address nor an interface name");
        }
        Ok(InterfaceSpec::Name(s.to_owned()))
    }
}

impl std::fmt::Display for InterfaceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InterfaceSpec::Name(n) => f.write_str(n),
            InterfaceSpec::Addr(a) => write!(f, "{a}"),
        }
    }
}

/// The first IPv4 address of interface `name`, via `getifaddrs`.
fn interface_ipv4(name: &str) -> io::Result<Option<Ipv4Addr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list returned by getifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let ifname = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        // SAFETY: ifa_addr points to a sockaddr of at least sa_family.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int;
        if family == libc::AF_INET && ifname.to_bytes() == name.as_bytes() {
            // SAFETY: AF_INET means the address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

/// One line of a feed: a multicast group carrying the feed's packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineSpec {
    /// For logs and metrics (`A`, `B`).
    pub name: String,
    pub group: Ipv4Addr,
    pub port: u16,
    pub interface: InterfaceSpec,
    /// Source-specific multicast: only this sender (IP_ADD_SOURCE_MEMBERSHIP).
    pub source: Option<Ipv4Addr>,
    /// Requested SO_RCVBUF in bytes; `None` leaves the system default.
    pub rcvbuf: Option<usize>,
}

/// Receive buffer `LineSpec::new` asks for. A small datagram takes ~1.2 KB
/// of socket buffer on loopback (the kernel counts the whole skb), so the
/// usual 208 KB default holds under 200 datagrams: a few hundred
/// microseconds of a busy feed.
pub const DEFAULT_RCVBUF: usize = 8 << 20;

impl LineSpec {
    /// `name` on `group:port` via `interface`, any source,
    /// [`DEFAULT_RCVBUF`].
    pub fn new(name: &str, group: SocketAddrV4, interface: InterfaceSpec) -> LineSpec {
        LineSpec {
            name: name.to_owned(),
            group: *group.ip(),
            port: group.port(),
            interface,
            source: None,
            rcvbuf: Some(DEFAULT_RCVBUF),
        }
    }
}

/// How the feed thread reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverOptions {
    /// Datagrams per `recvmmsg` call.
    pub batch: usize,
    /// Largest datagram accepted; a longer one is counted as truncated and
    /// dropped (it would be invalid anyway). The default fits a 1500-byte
    /// MTU; raise it for jumbo frames (the buffers grow with it, and so
    /// does the cache footprint of a batch).
    pub max_datagram: usize,
    /// Spin on non-blocking reads instead of sleeping in epoll.
    pub busy_poll: bool,
    /// Pin the feed thread to this CPU (sched_setaffinity).
    pub cpu: Option<usize>,
    /// Run the feed thread SCHED_FIFO at this priority (1-99), so that
    /// other work on its CPU cannot delay reading until the socket buffer
    /// overflows. Needs CAP_SYS_NICE; with `busy_poll` it owns the CPU
    /// (the kernel's RT throttling still leaves others 5%).
    pub fifo_priority: Option<i32>,
    /// Longest sleep before the stop flag is checked again.
    pub poll_timeout: Duration,
    /// Arrival time from the kernel (SO_TIMESTAMPNS, per datagram: when
    /// the stack received it) rather than one clock read per batch (when
    /// the feed thread read it). Costs ~10% of the receive path on
    /// loopback; worth it for honest arrival-to-applied latency.
    pub kernel_timestamps: bool,
    /// Ask the kernel for each datagram's source address (given to
    /// `on_datagram_from`; `0.0.0.0:0` when off). `tickgate record` needs
    /// it; the feed thread does not (source filtering is the kernel's SSM).
    pub source_addresses: bool,
    /// recovery.md R4: the feed's re-request servers. With any, the
    /// receiver opens the feed's re-request socket: the handler's requests
    /// (`poll_request`) leave from it and answers from these addresses
    /// are handed to `on_rerequest_answer`.
    pub rerequest: Vec<std::net::SocketAddr>,
}

impl Default for ReceiverOptions {
    fn default() -> Self {
        ReceiverOptions {
            batch: 64,
            max_datagram: 1536,
            busy_poll: false,
            cpu: None,
            fifo_priority: None,
            poll_timeout: Duration::from_millis(100),
            kernel_timestamps: true,
            source_addresses: false,
            rerequest: Vec::new(),
        }
    }
}

/// Counters of one line, written by the feed thread only (once per batch)
/// and read by anyone (metrics).
#[derive(Debug, Default)]
pub struct LineStats {
    datagrams: AtomicU64,
    bytes: AtomicU64,
    batches: AtomicU64,
    /// The socket's drop count as last reported by SO_RXQ_OVFL (the kernel
    /// reports it only on the datagrams that follow a drop).
    kernel_drops: AtomicU64,
    truncated: AtomicU64,
    /// recvmmsg failures other than "nothing waiting".
    errors: AtomicU64,
    /// Datagrams delivered without a kernel timestamp (arrival taken from
    /// the clock once per batch instead).
    no_timestamp: AtomicU64,
}

/// A copy of [`LineStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineStatsSnapshot {
    pub datagrams: u64,
    pub bytes: u64,
    pub batches: u64,
    pub kernel_drops: u64,
    pub truncated: u64,
    pub errors: u64,
    pub no_timestamp: u64,
}

impl LineStats {
    pub fn snapshot(&self) -> LineStatsSnapshot {
        LineStatsSnapshot {
            datagrams: self.datagrams.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            kernel_drops: self.kernel_drops.load(Ordering::Relaxed),
            truncated: self.truncated.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            no_timestamp: self.no_timestamp.load(Ordering::Relaxed),
        }
    }

    /// Single writer: a plain load + store is enough and avoids a locked
    /// read-modify-write on the hot path.
    fn add(counter: &AtomicU64, n: u64) {
        if n != 0 {
            counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        }
    }
}

/// What the feed thread calls. Implemented for every
/// `FnMut(line, datagram, arrival_ns)`, so a closure around the core's
/// `Feed::on_datagram` is enough.
pub trait DatagramHandler {
    /// One datagram of line `line` (index into the feed's `LineSpec`s),
    /// `arrival_ns` = kernel receive time, Unix nanoseconds.
    fn on_datagram(&mut self, line: usize, datagram: &[u8], arrival_ns: i64);

    /// The same with the sender's address (`tickgate record` needs it).
    /// The receiver always calls this one.
    fn on_datagram_from(
        &mut self,
        line: usize,
        _source: SocketAddrV4,
        datagram: &[u8],
        arrival_ns: i64,
    ) {
        self.on_datagram(line, datagram, arrival_ns)
    }

    /// Called for a datagram a few places (`PREFETCH_AHEAD`) ahead of the
    /// one being delivered, so that the handler can prefetch the state it
    /// will touch (a symbol table much larger than the cache costs a miss
    /// per datagram otherwise). Must not change anything.
    #[inline]
    fn prefetch(&mut self, _datagram: &[u8]) {}

    /// The same, further ahead (`PREFETCH_EARLY`), before `prefetch` on
    /// the same datagram: for the first link of a chain of dependent
    /// loads (the index bucket that `prefetch` then reads to find the
    /// state). Must not change anything.
    #[inline]
    fn prefetch_early(&mut self, _datagram: &[u8]) {}

    /// After each round of reads that delivered something, and at least
    /// every `poll_timeout` when idle; `now` = CLOCK_REALTIME, Unix ns.
    /// For periodic work in the writer thread (publishing, timers).
    fn on_poll(&mut self, _now: i64) {}

    /// recovery.md R2/R4: when (Unix ns) the handler next needs `on_poll`
    /// even if no datagram arrives (a hole's deadline, a request due).
    fn next_timeout(&self) -> Option<i64> {
        None
    }

    /// R4: an answer from a configured re-request server.
    fn on_rerequest_answer(&mut self, _datagram: &[u8], _arrival_ns: i64) {}

    /// R4: a datagram on the re-request socket from any other address.
    fn on_foreign_answer(&mut self) {}

    /// R4: a request to send now: the server's index and the 20 bytes.
    fn poll_request(&mut self) -> Option<(usize, [u8; REQUEST_LEN])> {
        None
    }

    /// Whether `line` should be a member of its group now (venues.md
    /// `cme-mdp3`: a snapshot or definition loop only while needed). The
    /// receiver joins or leaves after each poll when this changes.
    fn line_wanted(&self, _line: usize) -> bool {
        true
    }
}

impl<F: FnMut(usize, &[u8], i64)> DatagramHandler for F {
    fn on_datagram(&mut self, line: usize, datagram: &[u8], arrival_ns: i64) {
        self(line, datagram, arrival_ns)
    }
}

/// The core's feed is a handler as it is: the feed thread owns it.
impl<P: crate::feed::Publish> DatagramHandler for crate::feed::Feed<P> {
    #[inline]
    fn on_datagram(&mut self, line: usize, datagram: &[u8], arrival_ns: i64) {
        // The outcome is counted inside the Feed.
        crate::feed::Feed::on_datagram(self, line, datagram, arrival_ns);
    }

    fn on_poll(&mut self, now: i64) {
        self.handle_timeout(now);
    }

    fn next_timeout(&self) -> Option<i64> {
        crate::feed::Feed::next_timeout(self)
    }

    fn on_rerequest_answer(&mut self, datagram: &[u8], arrival_ns: i64) {
        crate::feed::Feed::on_rerequest_answer(self, datagram, arrival_ns);
    }

    fn on_foreign_answer(&mut self) {
        self.count_foreign_answer();
    }

    fn poll_request(&mut self) -> Option<(usize, [u8; REQUEST_LEN])> {
        crate::feed::Feed::poll_request(self).map(|(i, r)| (i, r.encode()))
    }

    fn line_wanted(&self, line: usize) -> bool {
        crate::feed::Feed::line_wanted(self, line)
    }

    #[inline]
    fn prefetch(&mut self, datagram: &[u8]) {
        self.prefetch_state(datagram);
    }

    #[inline]
    fn prefetch_early(&mut self, datagram: &[u8]) {
        self.prefetch_index(datagram);
    }
}

/// CLOCK_REALTIME in Unix nanoseconds.
pub fn realtime_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    timespec_ns(&ts)
}

/// `time_t`/`c_long` are i64 on 64-bit Linux but not everywhere.
#[allow(clippy::unnecessary_cast)]
#[inline]
fn timespec_ns(ts: &libc::timespec) -> i64 {
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to an int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens, binds and joins one line's socket (non-blocking).
pub fn open_line_socket(line: &LineSpec, kernel_timestamps: bool) -> anyhow::Result<Socket> {
    let ctx = || {
        format!(
            "line {} ({}:{} on {})",
            line.name, line.group, line.port, line.interface
        )
    };
    if !line.group.is_multicast() {
        bail!("{}: {} is not a multicast group", ctx(), line.group);
    }
    let iface = line.interface.resolve().with_context(ctx)?;
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).with_context(ctx)?;
    // Several processes (the daemon, `tickgate record`) may listen to the
    // same group: multicast is delivered to every bound socket.
    sock.set_reuse_address(true).with_context(ctx)?;
    sock.set_reuse_port(true).with_context(ctx)?;
    // Bound to the group address, the socket only gets this group's
    // datagrams; IP_MULTICAST_ALL off also keeps out groups joined by
    // other sockets of this host on the same port.
    sock.set_multicast_all_v4(false).with_context(ctx)?;
    sock.bind(&SockAddr::from(SocketAddrV4::new(line.group, line.port)))
        .with_context(|| format!("{}: bind", ctx()))?;
    membership(&sock, line, &iface, true).with_context(|| match line.source {
        Some(src) => format!("{}: join source {src} via {iface}", ctx()),
        None => format!("{}: join via {iface}", ctx()),
    })?;
    if let Some(want) = line.rcvbuf {
        set_rcvbuf(&sock, want, &line.name)?;
    }
    let fd = sock.as_raw_fd();
    if kernel_timestamps {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
            .with_context(|| format!("{}: SO_TIMESTAMPNS", ctx()))?;
    }
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)
        .with_context(|| format!("{}: SO_RXQ_OVFL", ctx()))?;
    sock.set_nonblocking(true).with_context(ctx)?;
    Ok(sock)
}

/// Joins (`join`) or leaves the line's group on `iface`, source-specific
/// when the line names a source.
fn membership(sock: &Socket, line: &LineSpec, iface: &Ipv4Addr, join: bool) -> io::Result<()> {
    match (join, line.source) {
        (true, Some(src)) => sock.join_ssm_v4(&src, &line.group, iface),
        (true, None) => sock.join_multicast_v4(&line.group, iface),
        (false, Some(src)) => sock.leave_ssm_v4(&src, &line.group, iface),
        (false, None) => sock.leave_multicast_v4(&line.group, iface),
    }
}

/// SO_RCVBUF, then SO_RCVBUFFORCE (root) when net.core.rmem_max capped
/// it; warns when the kernel still grants less. The kernel doubles the
/// value set (bookkeeping overhead) and reports the doubled value.
fn set_rcvbuf(sock: &Socket, want: usize, line: &str) -> anyhow::Result<usize> {
    sock.set_recv_buffer_size(want)
        .with_context(|| format!("line {line}: SO_RCVBUF {want}"))?;
    let mut granted = sock.recv_buffer_size()? / 2;
    if granted < want {
        let v = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
        if setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v).is_ok() {
            granted = sock.recv_buffer_size()? / 2;
        }
    }
    if granted < want {
        tracing::warn!(
            line,
            requested = want,
            granted,
            "kernel granted a smaller receive buffer (raise net.core.rmem_max)"
        );
    }
    Ok(granted)
}

/// Longest wait in [`Receiver::open`] for kernel receive timestamps.
const TIMESTAMPS_WAIT: Duration = Duration::from_secs(2);

/// Waits (up to `timeout`) until the kernel stamps datagrams when they
/// arrive; false if it still did not. The first SO_TIMESTAMPNS socket of a
/// host only schedules that switch (the kernel flips it from a workqueue,
/// net_enable_timestamp), and a datagram queued before the work ran has no
/// stamp: recvmsg then gives it the time of the read. Such late stamps put
/// a line's whole batch after what the other lines got meanwhile (false
/// channel gaps, C3) and hide the queueing delay from the latency metrics.
/// Probe: a datagram to ourselves over loopback, read once it is queued; a
/// kernel stamp is earlier than the clock read just before the read, a
/// read-time stamp is not. Holding our own SO_TIMESTAMPNS socket until the
/// caller's are open is not needed: theirs keep the switch on.
pub fn await_kernel_timestamps(timeout: Duration) -> io::Result<bool> {
    let probe = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    probe.bind(&SockAddr::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)))?;
    let fd = probe.as_raw_fd();
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    let me = probe.local_addr()?;
    let deadline = Instant::now() + timeout;
    let mut byte = [0u8; 1];
    let mut cmsg = [0u64; CMSG_WORDS];
    loop {
        probe.send_to(b"t", &me)?;
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if ready > 0 {
            let before_read = realtime_ns();
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr() as *mut libc::c_void,
                iov_len: byte.len(),
            };
            // SAFETY: all-zero msghdr is valid; fields are set below.
            let mut msg: libc::msghdr = unsafe { mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = CMSG_WORDS * 8;
            // SAFETY: msg points to live buffers for the call.
            let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
            if n >= 0 {
                if let (Some(ts), _) = parse_cmsgs(&msg) {
                    if ts < before_read {
                        return Ok(true);
                    }
                }
            }
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// SCHED_FIFO at `priority` for the calling thread.
pub fn set_fifo_priority(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: plain syscall on the calling thread with a valid param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks the index.
    unsafe {
        let mut set: libc::cpu_set_t = mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Room for SCM_TIMESTAMPNS (a timespec) and SO_RXQ_OVFL (a u32), with
/// headroom; in u64 words so the buffer is aligned for cmsghdr.
const CMSG_WORDS: usize = 16;

/// Bytes between two receive buffers: `max` rounded up to a cache line,
/// plus one line, so that the buffers' first lines (the only ones a small
/// datagram touches) do not all fall into the same cache sets, as they
/// would with a power-of-two stride.
#[inline]
fn slot_stride(max: usize) -> usize {
    max.div_ceil(64) * 64 + 64
}

/// How many datagrams ahead of delivery `DatagramHandler::prefetch` runs:
/// enough to hide a memory access behind the work on the ones between.
const PREFETCH_AHEAD: usize = 4;
/// The same for `DatagramHandler::prefetch_early`: its line must be in
/// the cache by the time `prefetch` reads it, PREFETCH_AHEAD later.
const PREFETCH_EARLY: usize = 2 * PREFETCH_AHEAD;

/// The sockets of one feed and the preallocated `recvmmsg` arrays. Each
/// line has room for two batches: what its last read brought and what is
/// still held back (see [`Receiver::deliver`]). Not thread-safe by design:
/// it lives in the feed thread.
pub struct Receiver {
    lines: Vec<LineSpec>,
    sockets: Vec<Socket>,
    stats: Arc<[LineStats]>,
    epoll: OwnedFd,
    opts: ReceiverOptions,
    /// Slots per line (two batches); slot `line * cap + i`.
    cap: usize,
    /// Per slot: buffer, iovec, sender address, control data, header,
    /// arrival time, and whether it is to be skipped (truncated).
    bufs: Vec<u8>,
    iovecs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_in>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
    hdrs: Vec<libc::mmsghdr>,
    arrivals: Vec<i64>,
    skip: Vec<bool>,
    /// Per line: undelivered datagrams are slots `head..filled`.
    head: Vec<usize>,
    filled: Vec<usize>,
    /// Per line: the last read filled every slot it asked for (so more
    /// may be waiting in the kernel), and the latest arrival time read.
    more: Vec<bool>,
    last_arrival: Vec<i64>,
    /// Clock read just before the current read round's first `recvmmsg`
    /// (several lines only): datagrams that arrived later may have an
    /// earlier copy still unread on a line read before them.
    round_start: i64,
    events: Vec<libc::epoll_event>,
    /// Lines reported ready by epoll (capacity: one per line).
    ready: Vec<usize>,
    /// Last SO_RXQ_OVFL value per line (the kernel's u32 counter).
    last_ovfl: Vec<Option<u32>>,
    /// R4: the feed's re-request socket, when it has servers.
    rerequest: Option<RerequestSocket>,
    /// Per line: a member of its group now (see `sync_membership`).
    joined: Vec<bool>,
    /// Per line: the last join or leave failed (logged once).
    membership_failing: Vec<bool>,
}

// SAFETY: the raw pointers inside the mmsghdr/iovec arrays point into
// heap buffers owned by the same Receiver; moving the Receiver to another
// thread moves them together (heap buffers do not move).
unsafe impl Send for Receiver {}

impl Receiver {
    /// Opens and joins every line. Errors name the line.
    pub fn open(lines: &[LineSpec], opts: ReceiverOptions) -> anyhow::Result<Receiver> {
        if lines.is_empty() {
            bail!("a feed needs at least one line");
        }
        if opts.batch == 0 || opts.max_datagram == 0 {
            bail!("receiver batch and max_datagram must be positive");
        }
        let sockets = lines
            .iter()
            .map(|l| open_line_socket(l, opts.kernel_timestamps))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // Only once the kernel stamps on arrival are the first datagrams'
        // arrival times true (see `await_kernel_timestamps`).
        if opts.kernel_timestamps
            && !await_kernel_timestamps(TIMESTAMPS_WAIT).context("probing kernel timestamps")?
        {
            tracing::warn!(
                "kernel receive timestamps not active yet; the first datagrams may carry the time they were read"
            );
        }
        // SAFETY: plain syscall; the fd is owned right after.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error()).context("epoll_create1");
        }
        // SAFETY: `ep` is a fresh fd we own.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        for (i, s) in sockets.iter().enumerate() {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            // SAFETY: valid epoll fd, socket fd and event pointer.
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, s.as_raw_fd(), &mut ev) } != 0 {
                return Err(io::Error::last_os_error()).context("epoll_ctl");
            }
        }
        let rerequest = if opts.rerequest.is_empty() {
            None
        } else {
            let r = RerequestSocket::open(&opts.rerequest)?;
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: REREQUEST_TOKEN,
            };
            // SAFETY: valid epoll fd, socket fd and event pointer.
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, r.fd(), &mut ev) } != 0 {
                return Err(io::Error::last_os_error()).context("epoll_ctl (re-request socket)");
            }
            Some(r)
        };
        let k = lines.len();
        let cap = 2 * opts.batch;
        let slots = k * cap;
        let mut r = Receiver {
            lines: lines.to_vec(),
            stats: (0..k).map(|_| LineStats::default()).collect(),
            sockets,
            epoll,
            cap,
            bufs: vec![0u8; slots * slot_stride(opts.max_datagram)],
            iovecs: Vec::with_capacity(slots),
            // SAFETY: sockaddr_in is plain data; all-zero is valid.
            names: vec![unsafe { mem::zeroed() }; slots],
            cmsgs: vec![[0u64; CMSG_WORDS]; slots],
            hdrs: Vec::with_capacity(slots),
            arrivals: vec![0; slots],
            skip: vec![false; slots],
            head: vec![0; k],
            filled: vec![0; k],
            more: vec![false; k],
            last_arrival: vec![i64::MIN; k],
            round_start: i64::MAX,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; k + 1],
            ready: Vec::with_capacity(k),
            last_ovfl: vec![None; k],
            rerequest,
            joined: vec![true; k],
            membership_failing: vec![false; k],
            opts,
        };
        r.wire_headers();
        Ok(r)
    }

    /// Points every mmsghdr at its buffer, name and control space. The
    /// arrays never grow afterwards, so the pointers stay valid.
    fn wire_headers(&mut self) {
        let stride = slot_stride(self.opts.max_datagram);
        let slots = self.arrivals.len();
        let base = self.bufs.as_mut_ptr();
        for i in 0..slots {
            self.iovecs.push(libc::iovec {
                // SAFETY: i * stride is within `bufs` (slots * stride bytes).
                iov_base: unsafe { base.add(i * stride) } as *mut libc::c_void,
                iov_len: self.opts.max_datagram,
            });
        }
        for i in 0..slots {
            // SAFETY: all-zero msghdr is valid; fields are set below.
            let mut h: libc::mmsghdr = unsafe { mem::zeroed() };
            h.msg_hdr.msg_iov = &mut self.iovecs[i];
            h.msg_hdr.msg_iovlen = 1;
            self.hdrs.push(h);
        }
        self.reset_headers(0, slots);
    }

    /// recvmmsg overwrites namelen/controllen/flags: restore them.
    #[inline]
    fn reset_headers(&mut self, from: usize, n: usize) {
        for i in from..from + n {
            let h = &mut self.hdrs[i].msg_hdr;
            if self.opts.source_addresses {
                h.msg_name = &mut self.names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
                h.msg_namelen = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
            h.msg_control = self.cmsgs[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CMSG_WORDS * 8;
            h.msg_flags = 0;
        }
    }

    /// The feed's lines, in index order.
    pub fn lines(&self) -> &[LineSpec] {
        &self.lines
    }

    /// Per-line counters (index = line), shareable with a metrics thread.
    pub fn stats(&self) -> Arc<[LineStats]> {
        self.stats.clone()
    }

    /// Moves `line`'s held datagrams to the front of its slots.
    fn compact(&mut self, line: usize) {
        let (head, filled) = (self.head[line], self.filled[line]);
        if head == 0 {
            return;
        }
        let base = line * self.cap;
        let stride = slot_stride(self.opts.max_datagram);
        for (to, from) in (base..).zip(base + head..base + filled) {
            let len = self.hdrs[from].msg_len as usize;
            self.bufs
                .copy_within(from * stride..from * stride + len, to * stride);
            self.hdrs[to].msg_len = self.hdrs[from].msg_len;
            self.names[to] = self.names[from];
            self.arrivals[to] = self.arrivals[from];
            self.skip[to] = self.skip[from];
        }
        self.filled[line] = filled - head;
        self.head[line] = 0;
    }

    /// One non-blocking `recvmmsg` from `line` into its free slots (up to a
    /// batch); returns how many were read (0: nothing waiting, or no room).
    fn recv_batch(&mut self, line: usize) -> io::Result<usize> {
        self.compact(line);
        let want = self.opts.batch.min(self.cap - self.filled[line]);
        if want == 0 {
            // Full of held datagrams: the kernel may hold more, and newer.
            self.more[line] = true;
            return Ok(0);
        }
        let base = line * self.cap + self.filled[line];
        let fd = self.sockets[line].as_raw_fd();
        // SAFETY: hdrs[base..base + want] are this line's free slots and
        // point into our own buffers.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr().add(base),
                want as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            self.more[line] = false;
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => {
                    LineStats::add(&self.stats[line].errors, 1);
                    Err(io::Error::new(
                        e.kind(),
                        format!("line {}: recvmmsg: {e}", self.lines[line].name),
                    ))
                }
            };
        }
        let got = got as usize;
        let mut fallback_now: Option<i64> = None;
        let (mut bytes, mut truncated, mut no_ts) = (0u64, 0u64, 0u64);
        // The latest arrival read, not the last one's: a socket queue is
        // FIFO, but its stamps can still go back (a read-time stamp, see
        // `await_kernel_timestamps`; a clock step). With the last one, a
        // head later than it would be held back by its own line, and once
        // the line's slots are full it would never be read again (livelock).
        let mut latest = self.last_arrival[line];
        for slot in base..base + got {
            let hdr = &self.hdrs[slot];
            let msg_flags = hdr.msg_hdr.msg_flags;
            let len = hdr.msg_len as u64;
            let (ts, ovfl) = parse_cmsgs(&hdr.msg_hdr);
            if let Some(d) = ovfl {
                self.note_ovfl(line, d);
            }
            let skip = msg_flags & libc::MSG_TRUNC != 0;
            if skip {
                truncated += 1;
            } else {
                bytes += len;
            }
            self.skip[slot] = skip;
            let t = match ts {
                Some(t) => t,
                None => {
                    no_ts += skip as u64 ^ 1;
                    *fallback_now.get_or_insert_with(realtime_ns)
                }
            };
            self.arrivals[slot] = t;
            latest = latest.max(t);
        }
        self.reset_headers(base, got);
        self.last_arrival[line] = latest;
        self.filled[line] += got;
        self.more[line] = got == want;
        let st = &self.stats[line];
        LineStats::add(&st.datagrams, got as u64 - truncated);
        LineStats::add(&st.bytes, bytes);
        LineStats::add(&st.batches, 1);
        LineStats::add(&st.truncated, truncated);
        LineStats::add(&st.no_timestamp, no_ts);
        if truncated > 0 {
            tracing::warn!(
                line = self.lines[line].name.as_str(),
                truncated,
                max = self.opts.max_datagram,
                "datagrams longer than max_datagram dropped"
            );
        }
        Ok(got)
    }

    /// Offers slot `slot` to `handler.prefetch_early` (`early`) or
    /// `handler.prefetch`.
    #[inline]
    fn prefetch_slot<H: DatagramHandler + ?Sized>(
        &self,
        slot: usize,
        early: bool,
        handler: &mut H,
    ) {
        if !self.skip[slot] {
            let start = slot * slot_stride(self.opts.max_datagram);
            let len = self.hdrs[slot].msg_len as usize;
            let datagram = &self.bufs[start..start + len];
            if early {
                handler.prefetch_early(datagram);
            } else {
                handler.prefetch(datagram);
            }
        }
    }

    /// Hands slot `slot` of `line` to the handler.
    #[inline]
    fn deliver_slot<H: DatagramHandler + ?Sized>(&self, line: usize, slot: usize, handler: &mut H) {
        if self.skip[slot] {
            return;
        }
        let start = slot * slot_stride(self.opts.max_datagram);
        let len = self.hdrs[slot].msg_len as usize;
        let sin = &self.names[slot];
        let src = SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
            u16::from_be(sin.sin_port),
        );
        handler.on_datagram_from(
            line,
            src,
            &self.bufs[start..start + len],
            self.arrivals[slot],
        );
    }

    /// Delivers the datagrams read so far, all lines merged by arrival time
    /// (so that of the A and B copies of a packet the earlier one is
    /// applied, and a packet one line lost is found on the other line
    /// before the first line's next packet can open a gap, C3).
    ///
    /// A line whose last read was full may have older datagrams still in
    /// the kernel than what the other lines brought: everything that
    /// arrived after the latest datagram read from that line is held back
    /// until the line is read again.
    fn deliver<H: DatagramHandler + ?Sized>(&mut self, handler: &mut H) -> usize {
        let k = self.sockets.len();
        let watermark = (0..k)
            .filter(|&l| self.more[l])
            .map(|l| self.last_arrival[l])
            .min()
            .unwrap_or(i64::MAX)
            .min(self.round_start);
        // Offer the first datagrams of each line for prefetch, both stages
        // (the loop below offers the ones further ahead).
        for line in 0..k {
            let (h, f) = (self.head[line], self.filled[line]);
            let base = line * self.cap;
            for slot in base + h..base + f.min(h + PREFETCH_EARLY) {
                self.prefetch_slot(slot, true, handler);
            }
            for slot in base + h..base + f.min(h + PREFETCH_AHEAD) {
                self.prefetch_slot(slot, false, handler);
            }
        }
        let mut delivered = 0;
        loop {
            // The earliest head among the lines (k is small: a scan).
            let mut best: Option<(i64, usize)> = None;
            for line in 0..k {
                let h = self.head[line];
                if h < self.filled[line] {
                    let t = self.arrivals[line * self.cap + h];
                    if t <= watermark && best.is_none_or(|(bt, _)| t < bt) {
                        best = Some((t, line));
                    }
                }
            }
            let Some((_, line)) = best else { break };
            let base = line * self.cap;
            let h = self.head[line];
            if h + PREFETCH_EARLY < self.filled[line] {
                self.prefetch_slot(base + h + PREFETCH_EARLY, true, handler);
            }
            if h + PREFETCH_AHEAD < self.filled[line] {
                self.prefetch_slot(base + h + PREFETCH_AHEAD, false, handler);
            }
            self.head[line] = h + 1;
            self.deliver_slot(line, base + h, handler);
            delivered += 1;
        }
        for line in 0..k {
            if self.head[line] == self.filled[line] {
                self.head[line] = 0;
                self.filled[line] = 0;
            }
        }
        delivered
    }

    /// Datagrams read but not delivered yet.
    fn held(&self) -> usize {
        (0..self.sockets.len())
            .map(|l| self.filled[l] - self.head[l])
            .sum()
    }

    /// SO_RXQ_OVFL carries the socket's cumulative u32 drop count as of
    /// the datagram's enqueueing: monotonic, so the wrapping difference is
    /// the number of new drops.
    fn note_ovfl(&mut self, line: usize, value: u32) {
        let delta = value.wrapping_sub(self.last_ovfl[line].unwrap_or(0));
        LineStats::add(&self.stats[line].kernel_drops, delta as u64);
        self.last_ovfl[line] = Some(value);
    }

    /// One read from each of `lines`, then delivery up to the watermark.
    /// Returns (datagrams read, whether some line may have more waiting).
    fn read_round<H: DatagramHandler + ?Sized>(
        &mut self,
        lines: &[usize],
        handler: &mut H,
    ) -> io::Result<(usize, bool)> {
        let mut total = 0;
        // Lines are read one after another: a datagram that arrived on line
        // B after line A was read can be older than one read from B. Only
        // what arrived before the round began is known to be complete on
        // every line; later datagrams wait for the next round (C2/C3 must
        // see the lines in arrival order, or a packet B has looks lost).
        //
        // A datagram stamped no later than one already read had arrived
        // before this round began, whatever the clock did since: after the
        // clock steps back, the datagrams held from before the step would
        // otherwise wait until the clock catches up (and, a line's slots
        // full, the kernel would drop what follows).
        self.round_start = if self.sockets.len() > 1 {
            let read_before = self.last_arrival.iter().copied().max().unwrap_or(i64::MIN);
            realtime_ns().max(read_before)
        } else {
            i64::MAX
        };
        for &line in lines {
            match self.recv_batch(line) {
                Ok(got) => total += got,
                Err(e) => {
                    // Deliver what was read before failing.
                    self.deliver(handler);
                    return Err(e);
                }
            }
        }
        self.deliver(handler);
        Ok((total, lines.iter().any(|&l| self.more[l])))
    }

    /// Reads the lines until each is drained or 64 rounds were taken (so
    /// that a flood cannot starve the stop flag); then nothing is held back.
    fn drain<H: DatagramHandler + ?Sized>(
        &mut self,
        lines: &[usize],
        handler: &mut H,
    ) -> io::Result<usize> {
        let mut total = 0;
        for _round in 0..64 {
            let (got, more) = self.read_round(lines, handler)?;
            total += got;
            if !more {
                break;
            }
        }
        // After 64 rounds (a flood) some datagrams may be held back: the
        // lines they wait for have more queued, so the next epoll_wait
        // returns at once (and `poll` does not sleep while any are held).
        Ok(total)
    }

    /// Waits up to `timeout` for datagrams, then delivers everything
    /// waiting on the ready lines. Returns the number read (0 on timeout).
    /// Calls `handler.on_poll` once at the end.
    pub fn poll<H: DatagramHandler + ?Sized>(
        &mut self,
        timeout: Duration,
        handler: &mut H,
    ) -> io::Result<usize> {
        // Held-back datagrams must not wait for new traffic: if the line
        // they wait for turns out to be empty, they go out now.
        let ms = if self.held() > 0 {
            0
        } else {
            let mut ms = timeout.as_millis().min(i32::MAX as u128) as i64;
            // R2/R4: wake for the core's next deadline, rounded up to
            // epoll's millisecond (a deadline is applied at its own time
            // whenever the thread wakes; only the wake can be late).
            if let Some(at) = handler.next_timeout() {
                let wait = at.saturating_sub(realtime_ns()).max(0);
                ms = ms.min((wait + 999_999) / 1_000_000);
            }
            ms as libc::c_int
        };
        // SAFETY: events has room for one event per line.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        let mut n = n as usize;
        if let Some(i) = self.events[..n]
            .iter()
            .position(|e| e.u64 == REREQUEST_TOKEN)
        {
            // Answers first (they may fill a hole the lines' datagrams
            // wait behind); the lines' events stay in `events[..n]`.
            self.events.swap(i, n - 1);
            n -= 1;
            self.read_answers(handler)?;
        }
        let mut ready = mem::take(&mut self.ready);
        ready.clear();
        if self.sockets.len() > 1 && (n > 0 || self.held() > 0) {
            // Every line, not only those epoll reported: one may have
            // received since epoll_wait returned, and its datagrams must be
            // merged by arrival time with the others' (see `read_round`).
            ready.extend(0..self.sockets.len());
        } else {
            ready.extend(self.events[..n].iter().map(|e| e.u64 as usize));
            ready.sort_unstable();
        }
        // A line epoll does not report had nothing waiting.
        for (line, more) in self.more.iter_mut().enumerate() {
            *more &= ready.contains(&line);
        }
        let got = self.drain(&ready, handler);
        self.ready = ready;
        let got = got?;
        let now = realtime_ns();
        handler.on_poll(now);
        self.send_requests(handler, now);
        self.sync_membership(handler);
        Ok(got)
    }

    /// Joins or leaves each line's group as the handler now wants it
    /// (`DatagramHandler::line_wanted`). A failure is logged and retried
    /// at the next poll: the line stays as it was meanwhile.
    fn sync_membership<H: DatagramHandler + ?Sized>(&mut self, handler: &H) {
        for line in 0..self.sockets.len() {
            let want = handler.line_wanted(line);
            if want == self.joined[line] {
                continue;
            }
            let spec = &self.lines[line];
            let result = spec.interface.resolve().and_then(|iface| {
                membership(&self.sockets[line], spec, &iface, want).map_err(anyhow::Error::from)
            });
            let verb = if want { "join" } else { "leave" };
            match result {
                Ok(()) => {
                    self.joined[line] = want;
                    // Said once when a change that kept failing is made.
                    let after = if std::mem::take(&mut self.membership_failing[line]) {
                        " after failing"
                    } else {
                        ""
                    };
                    tracing::info!(
                        line = %spec.name,
                        group = %spec.group,
                        port = spec.port,
                        "{} the line's group{after}",
                        if want { "joined" } else { "left" }
                    );
                }
                // Said once while it keeps failing (it is tried at every
                // poll, thousands of times a second).
                Err(e) if !self.membership_failing[line] => {
                    self.membership_failing[line] = true;
                    tracing::warn!(
                        line = %spec.name,
                        error = %e,
                        "could not {verb} the line's group; trying again at every poll"
                    );
                }
                Err(e) => {
                    tracing::debug!(line = %spec.name, error = %e, "could not {verb} the line's group")
                }
            }
        }
    }

    /// Whether each line is a member of its group now.
    pub fn joined(&self) -> &[bool] {
        &self.joined
    }

    /// R4: every answer waiting on the re-request socket, to the handler.
    fn read_answers<H: DatagramHandler + ?Sized>(&mut self, handler: &mut H) -> io::Result<()> {
        let Some(sock) = self.rerequest.as_mut() else {
            return Ok(());
        };
        // Bounded per call, so a flood cannot keep the lines unread.
        for _ in 0..self.opts.batch {
            match sock.recv()? {
                None => break,
                Some(Received::Answer(d)) => handler.on_rerequest_answer(d, realtime_ns()),
                Some(Received::Foreign) => handler.on_foreign_answer(),
            }
        }
        Ok(())
    }

    /// R4: sends what the handler has queued (at most one is outstanding).
    fn send_requests<H: DatagramHandler + ?Sized>(&mut self, handler: &mut H, now: i64) {
        let Some(sock) = self.rerequest.as_mut() else {
            return;
        };
        while let Some((server, bytes)) = handler.poll_request() {
            sock.send(server, &bytes, now);
        }
    }

    /// The re-request socket's local address (tests point servers at it).
    pub fn rerequest_addr(&self) -> Option<std::net::SocketAddr> {
        self.rerequest.as_ref().and_then(|r| r.local_addr().ok())
    }

    /// One busy-poll pass: a non-blocking read from every line, delivered
    /// merged by arrival time (what a full line may still hold back waits
    /// for the next pass). Does not call `on_poll`.
    pub fn poll_nonblocking<H: DatagramHandler + ?Sized>(
        &mut self,
        handler: &mut H,
    ) -> io::Result<usize> {
        let mut all = mem::take(&mut self.ready);
        all.clear();
        all.extend(0..self.sockets.len());
        let r = self.read_round(&all, handler);
        self.ready = all;
        Ok(r?.0)
    }

    /// A receive error does not end the thread (a feed handler that stops
    /// reading is worse than one that logs): it is counted per line, logged
    /// at most once a second, and reading resumes after 10 ms.
    pub fn run<H: DatagramHandler + ?Sized>(&mut self, stop: &AtomicBool, handler: &mut H) {
        let mut last_log = i64::MIN;
        let mut on_error = |e: io::Error| {
            let now = realtime_ns();
            if now - last_log >= 1_000_000_000 {
                last_log = now;
                tracing::error!(error = %e, "receiving from the feed's lines failed; retrying");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if self.opts.busy_poll {
            let mut last_poll = realtime_ns();
            let period = self.opts.poll_timeout.as_nanos() as i64;
            let mut idle_spins = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let got = match self.poll_nonblocking(handler) {
                    Ok(n) => n,
                    Err(e) => {
                        on_error(e);
                        0
                    }
                };
                if got > 0 {
                    idle_spins = 0;
                    last_poll = realtime_ns();
                    if let Err(e) = self.read_answers(handler) {
                        on_error(e);
                    }
                    handler.on_poll(last_poll);
                    self.send_requests(handler, last_poll);
                    self.sync_membership(handler);
                } else {
                    idle_spins += 1;
                    std::hint::spin_loop();
                    // Read the clock (and the re-request socket) only now
                    // and then while idle.
                    if idle_spins.is_multiple_of(64) {
                        let now = realtime_ns();
                        let due = handler.next_timeout().is_some_and(|t| now >= t);
                        if now - last_poll >= period || due || self.rerequest.is_some() {
                            if let Err(e) = self.read_answers(handler) {
                                on_error(e);
                            }
                            last_poll = now;
                            handler.on_poll(now);
                            self.send_requests(handler, now);
                            self.sync_membership(handler);
                        }
                    }
                }
            }
        } else {
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = self.poll(self.opts.poll_timeout, handler) {
                    on_error(e);
                }
            }
        }
        self.deliver_held(handler);
    }

    /// On stopping: what was read but held back (for a line that had more
    /// queued, see `deliver`) goes to the handler, in arrival order, rather
    /// than being dropped after it was counted as received. No read
    /// follows, so nothing older can arrive to go before it.
    fn deliver_held<H: DatagramHandler + ?Sized>(&mut self, handler: &mut H) {
        self.more.fill(false);
        self.round_start = i64::MAX;
        self.deliver(handler);
    }
}

/// Kernel receive time (SCM_TIMESTAMPNS) and drop counter (SO_RXQ_OVFL)
/// of one received message.
#[inline]
fn parse_cmsgs(msg: &libc::msghdr) -> (Option<i64>, Option<u32>) {
    let (mut ts, mut ovfl) = (None, None);
    // SAFETY: the control buffer was filled by recvmmsg; the CMSG macros
    // stay within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let h = &*c;
            if h.cmsg_level == libc::SOL_SOCKET {
                if h.cmsg_type == libc::SCM_TIMESTAMPNS {
                    let t = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    ts = Some(timespec_ns(&t));
                } else if h.cmsg_type == libc::SO_RXQ_OVFL {
                    ovfl = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const u32));
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    (ts, ovfl)
}

/// A running feed thread.
pub struct FeedThread<H> {
    name: String,
    stop: Arc<AtomicBool>,
    stats: Arc<[LineStats]>,
    lines: Vec<LineSpec>,
    thread: Option<JoinHandle<H>>,
}

impl<H: DatagramHandler + Send + 'static> FeedThread<H> {
    /// Opens every line (errors are returned here, before any thread
    /// starts), then starts thread `feed-<name>` calling `handler` for each
    /// datagram until [`FeedThread::stop`].
    pub fn spawn(
        name: &str,
        lines: &[LineSpec],
        opts: ReceiverOptions,
        mut handler: H,
    ) -> anyhow::Result<FeedThread<H>> {
        let (cpu, fifo) = (opts.cpu, opts.fifo_priority);
        let mut rx =
            Receiver::open(lines, opts).with_context(|| format!("feed {name}: opening lines"))?;
        if let Some(local) = rx.rerequest_addr() {
            // R4: answers come back to this address (operators allow it
            // through firewalls; tests aim strangers at it).
            tracing::info!(feed = name, %local, "re-request socket bound");
        }
        let stats = rx.stats();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let fname = name.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("feed-{name}"))
            .spawn(move || -> H {
                if let Some(cpu) = cpu {
                    if let Err(e) = pin_current_thread(cpu) {
                        tracing::warn!(feed = fname.as_str(), cpu, error = %e, "could not pin the feed thread");
                    }
                }
                if let Some(p) = fifo {
                    if let Err(e) = set_fifo_priority(p) {
                        tracing::warn!(feed = fname.as_str(), priority = p, error = %e, "could not make the feed thread SCHED_FIFO");
                    }
                }
                tracing::info!(feed = fname.as_str(), lines = rx.lines().len(), "feed receiver started");
                rx.run(&stop2, &mut handler);
                handler
            })
            .context("spawning the feed thread")?;
        Ok(FeedThread {
            name: name.to_owned(),
            stop,
            stats,
            lines: lines.to_vec(),
            thread: Some(thread),
        })
    }

    /// Per-line counters, index = line.
    pub fn stats(&self) -> Arc<[LineStats]> {
        self.stats.clone()
    }

    pub fn lines(&self) -> &[LineSpec] {
        &self.lines
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The flag the thread checks (at least every `poll_timeout`).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// True once the thread has ended: after `stop`, or if the handler
    /// panicked (receive errors do not end it).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the thread and gives the handler back (or the error that
    /// ended the thread).
    pub fn stop(mut self) -> anyhow::Result<H> {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.take().expect("joined once");
        match t.join() {
            Ok(h) => Ok(h),
            Err(_) => bail!("feed {} thread panicked", self.name),
        }
    }
}

impl<H> Drop for FeedThread<H> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_spec_parses_address_or_name() {
        assert_eq!(
            "127.0.0.1".parse::<InterfaceSpec>().unwrap(),
            InterfaceSpec::Addr(Ipv4Addr::LOCALHOST)
        );
        assert_eq!(
            "lo".parse::<InterfaceSpec>().unwrap(),
            InterfaceSpec::Name("lo".into())
        );
        assert!("".parse::<InterfaceSpec>().is_err());
        assert!("a very long interface name"
            .parse::<InterfaceSpec>()
            .is_err());
    }

    #[test]
    fn loopback_name_resolves_to_its_address() {
        let a = InterfaceSpec::Name("lo".into()).resolve().unwrap();
        assert!(a.is_loopback(), "{a}");
        assert!(InterfaceSpec::Name("no-such-if0".into()).resolve().is_err());
    }

    #[test]
    fn non_multicast_group_is_refused() {
        let line = LineSpec::new(
            "A",
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
            InterfaceSpec::Addr(Ipv4Addr::LOCALHOST),
        );
        let e = Receiver::open(&[line], ReceiverOptions::default())
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("not a multicast group"), "{e:#}");
    }

    #[test]
    fn kernel_timestamps_predate_the_read_once_awaited() {
        assert!(await_kernel_timestamps(Duration::from_secs(20)).unwrap());
        // Kept open, so the kernel's switch stays on for this test.
        let line = LineSpec::new(
            "A",
            SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 41), 47041),
            InterfaceSpec::Addr(Ipv4Addr::LOCALHOST),
        );
        let mut rx = Receiver::open(&[line], ReceiverOptions::default()).unwrap();
        let tx = crate::sim::live::McastSender::open(&crate::sim::live::SenderOptions::new(
            Ipv4Addr::LOCALHOST,
        ))
        .unwrap();
        let g = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 41), 47041);
        tx.send(g, b"x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let before_read = realtime_ns();
        let mut got = Vec::new();
        for _ in 0..100 {
            rx.poll(
                Duration::from_millis(100),
                &mut |_l: usize, _d: &[u8], t: i64| got.push(t),
            )
            .unwrap();
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(got.len(), 1);
        assert!(got[0] < before_read, "stamped at arrival, not at the read");
    }

    /// Sends one-byte datagrams `0..n` to `g`, then reads line 0 until
    /// `want` were read (one batch), as the receiver's first read would.
    fn send_and_read_first(rx: &mut Receiver, g: SocketAddrV4, n: u8, want: usize) {
        let mut tx = crate::sim::live::McastSender::open(&crate::sim::live::SenderOptions::new(
            Ipv4Addr::LOCALHOST,
        ))
        .unwrap();
        let items: Vec<(SocketAddrV4, [u8; 1])> = (0..n).map(|i| (g, [i])).collect();
        tx.send_batch(&items).unwrap();
        let mut read = 0;
        for _ in 0..1000 {
            read += rx.recv_batch(0).unwrap();
            if read == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(read, want);
    }

    /// Polls until `n` datagrams were delivered or `rounds` polls of
    /// `timeout` passed; returns their first bytes in delivery order.
    fn poll_bytes(rx: &mut Receiver, n: usize, rounds: usize, timeout: Duration) -> Vec<u8> {
        let mut got = Vec::new();
        for _ in 0..rounds {
            rx.poll(timeout, &mut |_l: usize, d: &[u8], _t: i64| got.push(d[0]))
                .unwrap();
            if got.len() == n {
                break;
            }
        }
        got
    }

    /// A line whose stamps go back (a read-time stamp before the kernel's
    /// switch, a clock step) must still be delivered: its head is never
    /// held back by its own line, even with every slot full.
    #[test]
    fn a_line_whose_stamps_go_back_is_still_delivered() {
        let g = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 42), 47042);
        let line = LineSpec::new("A", g, InterfaceSpec::Addr(Ipv4Addr::LOCALHOST));
        let opts = ReceiverOptions {
            batch: 4,
            ..ReceiverOptions::default()
        };
        let mut rx = Receiver::open(&[line], opts).unwrap();
        // The first batch read, as if stamped at a read one second from
        // now: every later datagram's (true) stamp is earlier.
        send_and_read_first(&mut rx, g, 12, 4);
        let late = realtime_ns() + 1_000_000_000;
        rx.arrivals[..4].fill(late);
        rx.last_arrival[0] = late;
        let got = poll_bytes(&mut rx, 12, 100, Duration::from_millis(100));
        assert_eq!(
            got,
            (0..12u8).collect::<Vec<_>>(),
            "in queue order, none stuck"
        );
    }

    /// The clock stepped back after datagrams were read (here: stamps
    /// 1,000 s ahead of the clock): they are still delivered at once, not
    /// held until the clock catches up.
    #[test]
    fn datagrams_read_before_a_clock_step_back_are_not_held() {
        let ga = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 43), 47043);
        let gb = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 44), 47044);
        let lines = [
            LineSpec::new("A", ga, InterfaceSpec::Addr(Ipv4Addr::LOCALHOST)),
            LineSpec::new("B", gb, InterfaceSpec::Addr(Ipv4Addr::LOCALHOST)),
        ];
        let opts = ReceiverOptions {
            batch: 4,
            ..ReceiverOptions::default()
        };
        let mut rx = Receiver::open(&lines, opts).unwrap();
        send_and_read_first(&mut rx, ga, 3, 3);
        let ahead = realtime_ns() + 1_000_000_000_000;
        rx.arrivals[..3].fill(ahead);
        rx.last_arrival[0] = ahead;
        let got = poll_bytes(&mut rx, 3, 20, Duration::from_millis(20));
        assert_eq!(got, vec![0, 1, 2]);
    }

    #[test]
    fn ovfl_counter_deltas_accumulate() {
        let line = LineSpec::new(
            "A",
            SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 1), 47001),
            InterfaceSpec::Addr(Ipv4Addr::LOCALHOST),
        );
        let mut rx = Receiver::open(&[line], ReceiverOptions::default()).unwrap();
        rx.note_ovfl(0, 5);
        rx.note_ovfl(0, 5);
        rx.note_ovfl(0, 9);
        assert_eq!(rx.stats()[0].snapshot().kernel_drops, 9);
        rx.note_ovfl(0, u32::MAX - 1);
        assert_eq!(rx.stats()[0].snapshot().kernel_drops, u32::MAX as u64 - 1);
        // The kernel's u32 counter wraps around.
        rx.note_ovfl(0, 2);
        assert_eq!(rx.stats()[0].snapshot().kernel_drops, u32::MAX as u64 + 3);
    }
}

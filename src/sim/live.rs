//! Sending datagrams to multicast groups (I/O shell, Linux): the sender of
//! `tickgate simulate --live` and `tickgate replay --send` (which live with
//! their commands: this module imports none of its siblings), of the tests
//! and of the receive benchmark.
//!
//! Packets leave through one chosen interface (IP_MULTICAST_IF) with TTL 1
//! by default, so they are not routed beyond the local segment; loopback
//! delivery is on so that receivers on this host see them. Pacing follows
//! the recorded times (scaled by a speed factor), a fixed rate, or none;
//! whatever is due at once goes out in one `sendmmsg` call.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Most datagrams handed to one `sendmmsg` call.
pub const SEND_BATCH: usize = 64;

/// How the sending socket is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderOptions {
    /// IP_MULTICAST_IF: the address of the interface to send from.
    pub interface: Ipv4Addr,
    /// IP_MULTICAST_TTL; 1 keeps packets on the local segment.
    pub ttl: u32,
    /// IP_MULTICAST_LOOP: deliver to receivers on this host too.
    pub loopback: bool,
    /// Bind the socket to this source address (port 0: any port); the
    /// interface address when `None`. Source-specific tests need it.
    pub source: Option<SocketAddrV4>,
    pub sndbuf: Option<usize>,
}

impl SenderOptions {
    pub fn new(interface: Ipv4Addr) -> SenderOptions {
        SenderOptions {
            interface,
            ttl: 1,
            loopback: true,
            source: None,
            sndbuf: None,
        }
    }
}

/// A UDP socket for sending to multicast groups, with preallocated
/// `sendmmsg` arrays.
pub struct McastSender {
    sock: Socket,
    names: Vec<libc::sockaddr_in>,
    iovecs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in iovecs/hdrs are rebuilt on every send and
// never outlive a call; between calls they are dead values.
unsafe impl Send for McastSender {}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

impl McastSender {
    pub fn open(opts: &SenderOptions) -> anyhow::Result<McastSender> {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .context("creating the sending socket")?;
        sock.set_multicast_if_v4(&opts.interface)
            .with_context(|| format!("IP_MULTICAST_IF {}", opts.interface))?;
        sock.set_multicast_ttl_v4(opts.ttl)
            .context("IP_MULTICAST_TTL")?;
        sock.set_multicast_loop_v4(opts.loopback)
            .context("IP_MULTICAST_LOOP")?;
        if let Some(n) = opts.sndbuf {
            sock.set_send_buffer_size(n).context("SO_SNDBUF")?;
        }
        let bind = opts.source.unwrap_or(SocketAddrV4::new(opts.interface, 0));
        sock.bind(&SockAddr::from(bind))
            .with_context(|| format!("binding the sending socket to {bind}"))?;
        Ok(McastSender {
            sock,
            // SAFETY: plain data, all-zero is valid.
            names: vec![unsafe { mem::zeroed() }; SEND_BATCH],
            iovecs: Vec::with_capacity(SEND_BATCH),
            hdrs: vec![unsafe { mem::zeroed() }; SEND_BATCH],
        })
    }

    /// The socket's local address (the source receivers see).
    pub fn local_addr(&self) -> anyhow::Result<SocketAddrV4> {
        self.sock
            .local_addr()?
            .as_socket_ipv4()
            .context("sending socket has no IPv4 address")
    }

    /// One datagram.
    pub fn send(&self, dest: SocketAddrV4, datagram: &[u8]) -> io::Result<()> {
        self.sock.send_to(datagram, &SockAddr::from(dest))?;
        Ok(())
    }

    /// Every datagram of `batch` in order, `SEND_BATCH` per `sendmmsg`.
    pub fn send_batch<D: AsRef<[u8]>>(&mut self, batch: &[(SocketAddrV4, D)]) -> io::Result<()> {
        for chunk in batch.chunks(SEND_BATCH) {
            self.iovecs.clear();
            for (i, (dest, d)) in chunk.iter().enumerate() {
                self.names[i] = sockaddr_in(*dest);
                let d = d.as_ref();
                self.iovecs.push(libc::iovec {
                    iov_base: d.as_ptr() as *mut libc::c_void,
                    iov_len: d.len(),
                });
            }
            for i in 0..chunk.len() {
                let h = &mut self.hdrs[i].msg_hdr;
                h.msg_name = &mut self.names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
                h.msg_namelen = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                h.msg_iov = &mut self.iovecs[i];
                h.msg_iovlen = 1;
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
                h.msg_flags = 0;
            }
            let mut sent = 0;
            while sent < chunk.len() {
                // SAFETY: hdrs[sent..len] point to live names, iovecs and
                // the caller's datagrams for the duration of the call.
                let n = unsafe {
                    libc::sendmmsg(
                        self.sock.as_raw_fd(),
                        self.hdrs.as_mut_ptr().add(sent),
                        (chunk.len() - sent) as libc::c_uint,
                        0,
                    )
                };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::Interrupted => continue,
                        // Local queue full (ENOBUFS): back off and retry,
                        // the datagram is not lost by us.
                        _ if e.raw_os_error() == Some(libc::ENOBUFS) => {
                            std::thread::sleep(Duration::from_micros(50));
                            continue;
                        }
                        _ => return Err(e),
                    }
                }
                sent += n as usize;
            }
        }
        Ok(())
    }
}

/// When each datagram goes out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// At the recorded times (relative to the first), divided by `speed`
    /// (2.0 = twice as fast).
    Recorded { speed: f64 },
    /// `per_sec` datagrams per second, evenly spaced.
    Rate { per_sec: f64 },
    /// As fast as the socket takes them.
    MaxSpeed,
}

impl Pace {
    pub fn validate(&self) -> anyhow::Result<()> {
        match *self {
            Pace::Recorded { speed } if !(speed.is_finite() && speed > 0.0) => {
                bail!("speed must be a positive number, got {speed}")
            }
            Pace::Rate { per_sec } if !(per_sec.is_finite() && per_sec > 0.0) => {
                bail!("rate must be a positive number of datagrams per second, got {per_sec}")
            }
            _ => Ok(()),
        }
    }
}

/// What a paced send did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SendStats {
    pub datagrams: u64,
    pub bytes: u64,
    /// `sendmmsg` calls.
    pub batches: u64,
    pub elapsed: Duration,
}

impl SendStats {
    pub fn rate(&self) -> f64 {
        self.datagrams as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Datagrams due this soon are sent with those already due, in one
/// `sendmmsg`: at high rates one syscall per datagram would cap the rate,
/// and 50 us of jitter is well under any provider's own.
const BURST_WINDOW: Duration = Duration::from_micros(50);

/// How long before a burst is due the sender stops sleeping and spins
/// (sleep wakes up late by tens of microseconds).
const SPIN: Duration = Duration::from_micros(200);

/// Sleeps most of the way to `until`, then spins the last `spin`.
fn wait_until(until: Instant, spin: Duration) {
    let now = Instant::now();
    if until <= now {
        return;
    }
    let left = until - now;
    if left > spin {
        std::thread::sleep(left - spin);
    }
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Sends `(t_ns, destination, datagram)` items with `pace` until the items
/// run out, `stop` is set or `duration` has passed. Everything due at the
/// same moment goes out in one `sendmmsg`.
pub fn send_paced<I, D>(
    sender: &mut McastSender,
    items: I,
    pace: Pace,
    stop: &AtomicBool,
    duration: Option<Duration>,
) -> anyhow::Result<SendStats>
where
    I: IntoIterator<Item = (i64, SocketAddrV4, D)>,
    D: AsRef<[u8]>,
{
    send_paced_in_bursts(sender, items, pace, stop, duration, BURST_WINDOW)
}

/// [`send_paced`] with datagrams due within `burst` of one another sent
/// together. A burst of at least 200 us is coarse enough that the sender
/// sleeps between bursts instead of spinning: at 100,000 datagrams a second
/// the default 50 us bursts keep a core spinning, which a load test that
/// shares its cores with the daemon cannot afford.
pub fn send_paced_in_bursts<I, D>(
    sender: &mut McastSender,
    items: I,
    pace: Pace,
    stop: &AtomicBool,
    duration: Option<Duration>,
    burst: Duration,
) -> anyhow::Result<SendStats>
where
    I: IntoIterator<Item = (i64, SocketAddrV4, D)>,
    D: AsRef<[u8]>,
{
    let spin = if burst >= SPIN { Duration::ZERO } else { SPIN };
    pace.validate()?;
    let start = Instant::now();
    let deadline = duration.map(|d| start + d);
    let mut first_t: Option<i64> = None;
    let mut pending: Vec<(SocketAddrV4, D)> = Vec::with_capacity(SEND_BATCH);
    let mut stats = SendStats::default();
    let flush = |pending: &mut Vec<(SocketAddrV4, D)>,
                 stats: &mut SendStats,
                 sender: &mut McastSender|
     -> anyhow::Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        sender.send_batch(pending).context("sending datagrams")?;
        stats.datagrams += pending.len() as u64;
        stats.bytes += pending
            .iter()
            .map(|(_, d)| d.as_ref().len() as u64)
            .sum::<u64>();
        stats.batches += 1;
        pending.clear();
        Ok(())
    };
    for (i, (t_ns, dest, d)) in items.into_iter().enumerate() {
        let due = match pace {
            Pace::MaxSpeed => None,
            Pace::Rate { per_sec } => Some(start + Duration::from_secs_f64(i as f64 / per_sec)),
            Pace::Recorded { speed } => {
                let t0 = *first_t.get_or_insert(t_ns);
                // A capture may step back in time (clock adjustments):
                // such a packet is due at once.
                let rel = (t_ns - t0).max(0) as f64 / 1e9 / speed;
                Some(start + Duration::from_secs_f64(rel))
            }
        };
        if let Some(due) = due {
            if due > Instant::now() + burst {
                flush(&mut pending, &mut stats, sender)?;
                if stop.load(Ordering::Relaxed) || deadline.is_some_and(|dl| due >= dl) {
                    break;
                }
                wait_until(due, spin);
            }
        }
        if pending.len() == SEND_BATCH {
            flush(&mut pending, &mut stats, sender)?;
        }
        // The stop conditions, once per batch.
        if pending.is_empty()
            && (stop.load(Ordering::Relaxed) || deadline.is_some_and(|dl| Instant::now() >= dl))
        {
            break;
        }
        pending.push((dest, d));
    }
    flush(&mut pending, &mut stats, sender)?;
    stats.elapsed = start.elapsed();
    Ok(stats)
}

/// Only multicast groups (TTL-limited, sent via the chosen interface) or,
/// from loopback, loopback addresses: a capture's unicast destinations are
/// somebody else's hosts.
pub fn refuse_unroutable(dst: Ipv4Addr, iface: Ipv4Addr) -> anyhow::Result<()> {
    if dst.is_multicast() || (dst.is_loopback() && iface.is_loopback()) {
        Ok(())
    } else {
        bail!("refusing to send to {dst}: only multicast groups (or loopback addresses via a loopback interface)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_rejects_nonsense() {
        assert!(Pace::Recorded { speed: 0.0 }.validate().is_err());
        assert!(Pace::Recorded { speed: f64::NAN }.validate().is_err());
        assert!(Pace::Rate { per_sec: -1.0 }.validate().is_err());
        assert!(Pace::Rate { per_sec: 1000.0 }.validate().is_ok());
        assert!(Pace::MaxSpeed.validate().is_ok());
    }

    #[test]
    fn sockaddr_is_network_order() {
        let s = sockaddr_in(SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 0x1234));
        assert_eq!(u16::from_be(s.sin_port), 0x1234);
        assert_eq!(u32::from_be(s.sin_addr.s_addr), 0xEF01_0203);
    }
}

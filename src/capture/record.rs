//! `tickgate record`: write what a feed's lines receive to a nanosecond pcap (I/O).
//!
//! The receiver is the daemon's (`feed::receiver`), so the capture holds
//! exactly what the daemon would have seen, stamped with the kernel's
//! receive time (SO_TIMESTAMPNS): `tickgate replay` of the file uses those
//! stamps as its clock.

use std::fs::File;
use std::io::BufWriter;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::pcap::PcapWriter;
use crate::feed::receiver::{DatagramHandler, InterfaceSpec, LineSpec, Receiver, ReceiverOptions};

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// A multicast group and port to record, `239.1.1.1:30001`; repeat for
    /// several lines (A and B).
    #[arg(long = "group", value_name = "GROUP:PORT", required = true)]
    pub groups: Vec<SocketAddrV4>,
    /// The interface to join on: a name (`eth0`, `lo`) or its IPv4 address.
    #[arg(long)]
    pub interface: InterfaceSpec,
    /// Source-specific multicast: only datagrams from this sender.
    #[arg(long)]
    pub source: Option<Ipv4Addr>,
    /// The pcap to write (nanosecond timestamps, Ethernet frames).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Stop after this many datagrams (all lines together).
    #[arg(long)]
    pub count: Option<u64>,
    /// Receive buffer per line, bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub rcvbuf: usize,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Ctrl-C / SIGTERM end the recording cleanly (the file is flushed).
fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        let h = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
    }
}

struct Writer {
    pcap: PcapWriter<BufWriter<File>>,
    /// Destination of each line (the group), for the frame headers.
    dst: Vec<SocketAddrV4>,
    limit: u64,
    written: u64,
    error: Option<std::io::Error>,
}

impl DatagramHandler for Writer {
    fn on_datagram(&mut self, line: usize, datagram: &[u8], arrival_ns: i64) {
        let src = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        self.on_datagram_from(line, src, datagram, arrival_ns)
    }

    fn on_datagram_from(&mut self, line: usize, src: SocketAddrV4, d: &[u8], arrival: i64) {
        // A batch may carry more than --count asks for: the rest is not written.
        if self.written >= self.limit || self.error.is_some() {
            return;
        }
        match self.pcap.write_udp(arrival, src, self.dst[line], d) {
            Ok(()) => self.written += 1,
            Err(e) => self.error = Some(e),
        }
    }
}

pub fn main(args: RecordArgs) -> anyhow::Result<i32> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds, got {d}");
        }
    }
    let lines: Vec<LineSpec> = args
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| LineSpec {
            source: args.source,
            rcvbuf: Some(args.rcvbuf),
            ..LineSpec::new(&line_name(i), *g, args.interface.clone())
        })
        .collect();
    let mut rx = Receiver::open(&lines, ReceiverOptions::default())?;
    let pcap = PcapWriter::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut w = Writer {
        pcap,
        dst: args.groups.clone(),
        limit: args.count.unwrap_or(u64::MAX),
        written: 0,
        error: None,
    };
    install_signal_handlers();
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    eprintln!(
        "recording {} line(s) on {} to {}",
        lines.len(),
        args.interface,
        args.out.display()
    );
    loop {
        if INTERRUPTED.load(Ordering::Relaxed) || w.written >= w.limit || w.error.is_some() {
            break;
        }
        let timeout = match deadline {
            Some(dl) => {
                let now = Instant::now();
                if now >= dl {
                    break;
                }
                (dl - now).min(Duration::from_millis(100))
            }
            None => Duration::from_millis(100),
        };
        rx.poll(timeout, &mut w).context("receiving")?;
    }
    if let Some(e) = w.error.take() {
        return Err(e).with_context(|| format!("writing {}", args.out.display()));
    }
    w.pcap
        .flush()
        .with_context(|| format!("writing {}", args.out.display()))?;
    let stats = rx.stats();
    for (l, s) in lines.iter().zip(stats.iter()) {
        let s = s.snapshot();
        eprintln!(
            "line {} {}:{}: {} datagrams, {} bytes, kernel drops {}",
            l.name, l.group, l.port, s.datagrams, s.bytes, s.kernel_drops
        );
    }
    eprintln!(
        "wrote {} datagrams in {:.3} s",
        w.written,
        start.elapsed().as_secs_f64()
    );
    Ok(0)
}

/// `A`, `B`, ... like a feed's lines.
fn line_name(i: usize) -> String {
    if i < 26 {
        ((b'A' + i as u8) as char).to_string()
    } else {
        format!("L{i}")
    }
}

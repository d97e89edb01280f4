//! `tickgate record`: write what a feed's lines receive to a nanosecond pcap (I/O).
//!
//! The receiver is the daemon's (`net::receiver`), so the capture holds
//! exactly what the daemon would have seen, stamped with the kernel's
//! receive time (SO_TIMESTAMPNS): `tickgate replay` of the file uses those
//! stamps as its clock.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::compress::CaptureOutput;
use super::pcap::PcapWriter;
use crate::net::receiver::{DatagramHandler, InterfaceSpec, LineSpec, Receiver, ReceiverOptions};

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
    /// The pcap to write (nanosecond timestamps, Ethernet frames; `.gz` or
    /// `.zst`: compressed, see --compress).
    #[arg(long, short)]
    pub out: PathBuf,
    #[command(flatten)]
    pub compress: super::compress::CompressArgs,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Stop after this many datagrams (all lines together).
    #[arg(long)]
    pub count: Option<u64>,
    /// Receive buffer per line, bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub rcvbuf: usize,
    /// The venue the lines carry (venues.md): datagrams are recorded byte
    /// for byte whatever they are; at the end, how many were not valid for
    /// this venue is said per line (a wrong group or venue shows at once).
    #[arg(long, value_enum, default_value_t = super::venue_arg::VenueArg::Tickgate)]
    pub venue: super::venue_arg::VenueArg,
}

/// Datagrams are held this long before being written, so that what the
/// lines delivered in separate batches goes to the file in arrival order
/// (the receiver merges lines only within one round of reads).
const HOLD_NS: i64 = 5_000_000;

#[derive(Clone, Copy)]
struct Held {
    ts: i64,
    line: usize,
    src: SocketAddrV4,
    start: usize,
    len: usize,
}

struct Writer {
    pcap: PcapWriter<CaptureOutput>,
    /// Destination of each line (the group), for the frame headers.
    dst: Vec<SocketAddrV4>,
    limit: u64,
    written: u64,
    received: u64,
    held: Vec<Held>,
    arena: Vec<u8>,
    error: Option<std::io::Error>,
    /// Validates datagrams for `--venue` (nothing is applied).
    venue: crate::venue::AnyVenue,
    /// Per line: datagrams not valid for the venue.
    invalid: Vec<u64>,
}

impl Writer {
    /// Writes, in time order, every held datagram stamped before
    /// `watermark` (all of them for `i64::MAX`).
    fn write_until(&mut self, watermark: i64) {
        if self.held.is_empty() {
            return;
        }
        // Stable: datagrams with equal stamps keep their delivery order.
        self.held.sort_by_key(|h| h.ts);
        let n = self.held.partition_point(|h| h.ts < watermark);
        for h in &self.held[..n] {
            if self.written >= self.limit || self.error.is_some() {
                break;
            }
            let payload = &self.arena[h.start..h.start + h.len];
            match self.pcap.write_udp(h.ts, h.src, self.dst[h.line], payload) {
                Ok(()) => self.written += 1,
                Err(e) => self.error = Some(e),
            }
        }
        if n == self.held.len() {
            self.held.clear();
            self.arena.clear();
        } else {
            // Keep the rest, compacted.
            let rest: Vec<Held> = self.held.drain(n..).collect();
            let old = std::mem::take(&mut self.arena);
            self.held.clear();
            for mut h in rest {
                let start = self.arena.len();
                self.arena.extend_from_slice(&old[h.start..h.start + h.len]);
                h.start = start;
                self.held.push(h);
            }
        }
    }
}

impl DatagramHandler for Writer {
    fn on_datagram(&mut self, line: usize, datagram: &[u8], arrival_ns: i64) {
        let src = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        self.on_datagram_from(line, src, datagram, arrival_ns)
    }

    fn on_datagram_from(&mut self, line: usize, src: SocketAddrV4, d: &[u8], arrival: i64) {
        self.received += 1;
        if crate::venue::Venue::parse(&self.venue, d).is_err() {
            if let Some(n) = self.invalid.get_mut(line) {
                *n += 1;
            }
        }
        self.held.push(Held {
            ts: arrival,
            line,
            src,
            start: self.arena.len(),
            len: d.len(),
        });
        self.arena.extend_from_slice(d);
    }

    fn on_poll(&mut self, now: i64) {
        self.write_until(now - HOLD_NS);
    }
}

pub fn main(args: RecordArgs) -> anyhow::Result<i32> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds, got {d}");
        }
    }
    let (compression, level) = args.compress.for_path(&args.out)?;
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
    let opts = ReceiverOptions {
        // The frames written carry the sender's address.
        source_addresses: true,
        ..ReceiverOptions::default()
    };
    let mut rx = Receiver::open(&lines, opts)?;
    let pcap = PcapWriter::create_compressed(&args.out, compression, level)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut w = Writer {
        pcap,
        dst: args.groups.clone(),
        limit: args.count.unwrap_or(u64::MAX),
        written: 0,
        received: 0,
        held: Vec::new(),
        arena: Vec::new(),
        error: None,
        venue: crate::venue::AnyVenue::new(&crate::venue::VenueSettings {
            kind: args.venue.kind(),
            // Only `parse` is used: no book is ever filled.
            max_orders: 1,
            recovery_entries: 0,
            replay_tables: false,
        }),
        invalid: vec![0; lines.len()],
    };
    let interrupted = crate::util::signals::stop_on_signals();
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    eprintln!(
        "recording {} on {} to {}{}",
        crate::text::plural(lines.len() as u64, "line"),
        args.interface,
        args.out.display(),
        match compression {
            super::compress::Compression::None => String::new(),
            c => format!(" ({})", c.name()),
        }
    );
    loop {
        // --count: once enough arrived, the rest of the held ones are
        // written below.
        if interrupted.load(Ordering::Relaxed) || w.received >= w.limit || w.error.is_some() {
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
    w.write_until(i64::MAX);
    if let Some(e) = w.error.take() {
        return Err(e).with_context(|| format!("writing {}", args.out.display()));
    }
    let written = w.written;
    w.pcap
        .finish()
        .with_context(|| format!("writing {}", args.out.display()))?;
    let stats = rx.stats();
    for (i, (l, s)) in lines.iter().zip(stats.iter()).enumerate() {
        let s = s.snapshot();
        // Results: standard output.
        println!(
            "line {} {}:{}: {}, {}, kernel drops {}, not valid {} {}",
            l.name,
            l.group,
            l.port,
            crate::text::plural(s.datagrams, "datagram"),
            crate::text::plural(s.bytes, "byte"),
            s.kernel_drops,
            args.venue,
            w.invalid[i]
        );
    }
    println!(
        "wrote {} in {:.3} s",
        crate::text::plural(written, "datagram"),
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

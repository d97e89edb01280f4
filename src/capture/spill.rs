//! Spill files (I/O) of the external merge sort `replay` falls back to
//! when a capture has more sorted runs than its memory budget can read at
//! once: sorted chunks written to a temporary directory, read back as
//! [`DatagramSource`]s, and merged a bounded number at a time.
//!
//! A chunk file is a sequence of records: stamp (i64), source and
//! destination (IPv4 address and port each), payload length (u32), all
//! little-endian, then the payload. The directory and what is left in it
//! are removed when the [`SpillDir`] is dropped.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use super::merge::{Merge, READ_BUF, WRITE_BUF};
use super::pcap::CaptureError;
use super::source::{DatagramMeta, DatagramSource};

const HEADER: usize = 8 + 6 + 6 + 4;

/// What spilling cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Sorted chunks written from the input.
    pub chunks: u64,
    /// Merges of chunks into bigger ones before the last merge (0: the
    /// chunks were few enough to merge at once).
    pub passes: u32,
    /// Bytes written to spill files, every pass.
    pub bytes_written: u64,
}

/// A temporary directory of chunk files.
pub struct SpillDir {
    dir: tempfile::TempDir,
    next: u64,
    pub stats: SpillStats,
}

impl SpillDir {
    /// A new directory in `parent` (the system's temporary directory when
    /// `None`).
    pub fn new(parent: Option<&Path>) -> io::Result<SpillDir> {
        let b = tempfile::Builder::new().prefix("tickgate-sort-").to_owned();
        let dir = match parent {
            Some(p) => b.tempdir_in(p),
            None => b.tempdir(),
        }
        .map_err(|e| {
            let at = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
            io::Error::new(
                e.kind(),
                format!("creating a spill directory in {}: {e}", at.display()),
            )
        })?;
        Ok(SpillDir {
            dir,
            next: 0,
            stats: SpillStats::default(),
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A new chunk file to write.
    pub fn create(&mut self) -> io::Result<ChunkWriter> {
        let path = self.dir.path().join(format!("chunk-{:06}", self.next));
        self.next += 1;
        let f = File::create(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(ChunkWriter {
            w: BufWriter::with_capacity(WRITE_BUF, f),
            path,
            bytes: 0,
        })
    }

    /// Merges chunks (sorted each, in tie order) a group of at most
    /// `fan_in` at a time into bigger ones until at most `fan_in` are left;
    /// the merged files are removed. Returns the chunks left, in tie order.
    pub fn merge_down(
        &mut self,
        mut chunks: Vec<PathBuf>,
        fan_in: usize,
    ) -> io::Result<Vec<PathBuf>> {
        let fan_in = fan_in.max(2);
        while chunks.len() > fan_in {
            self.stats.passes += 1;
            let mut next = Vec::with_capacity(chunks.len().div_ceil(fan_in));
            for group in chunks.chunks(fan_in) {
                if group.len() == 1 {
                    next.push(group[0].clone());
                    continue;
                }
                let readers = group
                    .iter()
                    .map(|p| ChunkReader::open(p))
                    .collect::<io::Result<Vec<_>>>()?;
                let mut m = Merge::new(readers);
                let mut w = self.create()?;
                let mut buf = Vec::new();
                while let Some(meta) = m.next_into(&mut buf).map_err(|e| {
                    io::Error::other(format!("{}: {}", group[e.source].display(), e.error))
                })? {
                    w.write(meta, &buf)?;
                }
                next.push(w.finish(&mut self.stats)?);
                for p in group {
                    std::fs::remove_file(p)?;
                }
            }
            chunks = next;
        }
        Ok(chunks)
    }
}

/// A chunk file being written (see the module documentation).
pub struct ChunkWriter {
    w: BufWriter<File>,
    path: PathBuf,
    bytes: u64,
}

impl ChunkWriter {
    pub fn write(&mut self, m: DatagramMeta, payload: &[u8]) -> io::Result<()> {
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&m.ts_ns.to_le_bytes());
        h[8..12].copy_from_slice(&m.src.ip().octets());
        h[12..14].copy_from_slice(&m.src.port().to_le_bytes());
        h[14..18].copy_from_slice(&m.dst.ip().octets());
        h[18..20].copy_from_slice(&m.dst.port().to_le_bytes());
        h[20..24].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        self.w
            .write_all(&h)
            .and_then(|()| self.w.write_all(payload))
            .map_err(|e| self.named(e))?;
        self.bytes += (HEADER + payload.len()) as u64;
        Ok(())
    }

    /// The error with the chunk's path (a full `--sort-dir` says where).
    #[cold]
    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))
    }

    /// Flushes the file; returns its path.
    pub fn finish(mut self, stats: &mut SpillStats) -> io::Result<PathBuf> {
        if let Err(e) = self.w.flush() {
            return Err(self.named(e));
        }
        stats.bytes_written += self.bytes;
        Ok(self.path)
    }
}

/// A chunk file read back, in its (sorted) order.
pub struct ChunkReader {
    r: BufReader<File>,
}

impl ChunkReader {
    pub fn open(path: &Path) -> io::Result<ChunkReader> {
        let f = File::open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(ChunkReader {
            r: BufReader::with_capacity(READ_BUF, f),
        })
    }
}

impl DatagramSource for ChunkReader {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        let mut h = [0u8; HEADER];
        match crate::util::read::read_up_to(&mut self.r, &mut h).map_err(CaptureError::Io)? {
            0 => return Ok(None),
            HEADER => {}
            _ => {
                return Err(CaptureError::Corrupt {
                    offset: 0,
                    what: "spill file ends inside a record".into(),
                })
            }
        }
        let ts_ns = i64::from_le_bytes(h[0..8].try_into().expect("8 bytes"));
        let addr = |at: usize| {
            SocketAddrV4::new(
                Ipv4Addr::new(h[at], h[at + 1], h[at + 2], h[at + 3]),
                u16::from_le_bytes([h[at + 4], h[at + 5]]),
            )
        };
        let len = u32::from_le_bytes(h[20..24].try_into().expect("4 bytes")) as usize;
        if len > super::pcap::MAX_UDP_PAYLOAD {
            return Err(CaptureError::Corrupt {
                offset: 0,
                what: format!("spill record of {len} bytes"),
            });
        }
        buf.clear();
        buf.resize(len, 0);
        self.r.read_exact(buf).map_err(CaptureError::Io)?;
        Ok(Some(DatagramMeta {
            ts_ns,
            src: addr(8),
            dst: addr(14),
            len,
        }))
    }

    fn memory(&self) -> usize {
        READ_BUF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new([10, 0, 0, 1].into(), port)
    }

    fn write_chunk(dir: &mut SpillDir, items: &[(i64, u16)]) -> PathBuf {
        let mut w = dir.create().unwrap();
        for &(ts, tag) in items {
            let p = tag.to_le_bytes();
            let m = DatagramMeta {
                ts_ns: ts,
                src: a(tag),
                dst: a(9),
                len: 2,
            };
            w.write(m, &p).unwrap();
        }
        let mut st = SpillStats::default();
        w.finish(&mut st).unwrap()
    }

    fn read_all(path: &Path) -> Vec<(i64, u16)> {
        let mut r = ChunkReader::open(path).unwrap();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(m) = r.next(&mut buf).unwrap() {
            assert_eq!(m.src.port(), u16::from_le_bytes([buf[0], buf[1]]));
            out.push((m.ts_ns, m.src.port()));
        }
        out
    }

    /// A full `--sort-dir` names the file it could not write.
    #[test]
    fn a_full_disk_names_the_chunk() {
        let path = PathBuf::from("/dev/full");
        let Ok(f) = File::options().write(true).open(&path) else {
            eprintln!("SKIPPED a_full_disk_names_the_chunk: no /dev/full");
            return;
        };
        let mut w = ChunkWriter {
            w: BufWriter::new(f),
            path,
            bytes: 0,
        };
        let m = DatagramMeta {
            ts_ns: 1,
            src: a(1),
            dst: a(2),
            len: 64 << 10,
        };
        let payload = vec![0u8; 64 << 10];
        let err = (0..64)
            .find_map(|_| w.write(m, &payload).err())
            .or_else(|| w.finish(&mut SpillStats::default()).err())
            .expect("writing to /dev/full fails");
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(err.to_string().starts_with("/dev/full: "), "{err}");
    }

    #[test]
    fn chunks_read_back_as_written() {
        let mut d = SpillDir::new(None).unwrap();
        let items = [(-5, 1), (0, 2), (i64::MAX, 65535)];
        let p = write_chunk(&mut d, &items);
        assert_eq!(read_all(&p), items);
        // cut short: an error, not a panic
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        let mut r = ChunkReader::open(&p).unwrap();
        let mut buf = Vec::new();
        assert!(r.next(&mut buf).is_ok());
        assert!(r.next(&mut buf).is_ok());
        assert!(r.next(&mut buf).is_err());
    }

    #[test]
    fn merge_down_keeps_tie_order_over_several_passes() {
        let mut d = SpillDir::new(None).unwrap();
        // 10 chunks, each sorted, stamps colliding across chunks: tags say
        // chunk and position
        let mut all = Vec::new();
        let mut chunks = Vec::new();
        for c in 0..10u16 {
            let items: Vec<(i64, u16)> = (0..20u16)
                .map(|i| (((i * 7 + c * 3) % 13) as i64, c * 100 + i))
                .collect::<Vec<_>>();
            let mut items = items;
            items.sort_by_key(|p| p.0);
            all.extend(items.iter().copied());
            chunks.push(write_chunk(&mut d, &items));
        }
        let left = d.merge_down(chunks, 3).unwrap();
        assert!(left.len() <= 3);
        assert_eq!(d.stats.passes, 2);
        let readers: Vec<ChunkReader> =
            left.iter().map(|p| ChunkReader::open(p).unwrap()).collect();
        let mut m = Merge::new(readers);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(meta) = m.next_into(&mut buf).unwrap() {
            got.push((meta.ts_ns, meta.src.port()));
        }
        all.sort_by_key(|p| p.0); // stable: chunk order, then position
        assert_eq!(got, all);
        // only the chunks left remain on disk
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), left.len());
        let path = d.path().to_path_buf();
        drop(d);
        assert!(!path.exists());
    }
}

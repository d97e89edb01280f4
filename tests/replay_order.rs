//! `replay` takes datagrams in exact timestamp order (capture order among
//! equal stamps; with several files, the files' order then capture order)
//! whatever the capture's own order: merged `cat`-style, interleaved
//! thousands of times (sorted in spilled chunks), split into several files,
//! compressed. The order is compared with a stable sort done here in
//! memory, and the answers to checks with those of the pre-sorted capture.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tickgate::capture::stream::{CaptureStream, StreamOptions};
use tickgate::capture::{CaptureReader, CapturedDatagram, Compression, PcapWriter};

fn tickgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(args)
        .output()
        .expect("running tickgate")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn ok(args: &[&str]) -> Vec<u8> {
    let out = tickgate(args);
    assert!(
        out.status.success(),
        "tickgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A simulated capture of two lines (20 s); its datagrams in file order.
fn simulated(dir: &Path) -> Vec<CapturedDatagram> {
    let cap = dir.join("sim.pcap");
    ok(&[
        "simulate",
        "--out",
        p(&cap),
        "--seed",
        "11",
        "--duration",
        "20",
        "--symbols",
        "12",
        "--rate",
        "3000",
        "--loss-a",
        "0.01",
        "--loss-b",
        "0.01",
    ]);
    read(&cap)
}

fn read(path: &Path) -> Vec<CapturedDatagram> {
    CaptureReader::open(path)
        .unwrap()
        .map(|d| d.unwrap())
        .collect()
}

fn write(path: &Path, items: &[CapturedDatagram], c: Compression) {
    let mut w = PcapWriter::create_compressed(path, c, None).unwrap();
    for d in items {
        w.write_udp(d.ts_ns, d.src, d.dst, &d.payload).unwrap();
    }
    w.finish().unwrap();
}

/// The two lines of a capture (by destination, in order of appearance).
fn lines(all: &[CapturedDatagram]) -> (Vec<CapturedDatagram>, Vec<CapturedDatagram>) {
    let a = all[0].dst;
    let (x, y): (Vec<_>, Vec<_>) = all.iter().cloned().partition(|d| d.dst == a);
    assert!(x.len() > 1000 && y.len() > 1000, "{} {}", x.len(), y.len());
    (x, y)
}

/// The reference: the files' datagrams concatenated, stably sorted.
fn reference(files: &[&[CapturedDatagram]]) -> Vec<CapturedDatagram> {
    let mut v: Vec<CapturedDatagram> = files.iter().flat_map(|f| f.iter().cloned()).collect();
    v.sort_by_key(|d| d.ts_ns);
    v
}

/// What the stream hands out, and its summary.
fn streamed(paths: &[PathBuf], memory: usize) -> (Vec<CapturedDatagram>, Value) {
    let mut s = CaptureStream::open(
        paths,
        StreamOptions {
            memory_bytes: memory,
            ..StreamOptions::default()
        },
    )
    .unwrap();
    let mut out = Vec::new();
    while let Some(d) = s.next_datagram() {
        out.push(CapturedDatagram {
            ts_ns: d.ts,
            src: d.src,
            dst: d.dst,
            payload: d.payload.to_vec(),
        });
    }
    assert!(s.error().is_none());
    let o = s.summary().order;
    let summary = serde_json::json!({
        "runs": o.runs,
        "sources": o.sources,
        "chunked": o.chunked,
        "spill_chunks": o.spill.chunks,
        "spill_passes": o.spill.passes,
        "peak_bytes": o.peak_bytes,
    });
    (out, summary)
}

/// Checks every 250 ms over the capture, for a few symbols.
fn checks_file(dir: &Path, all: &[CapturedDatagram]) -> PathBuf {
    let t0 = all.iter().map(|d| d.ts_ns).min().unwrap();
    let t1 = all.iter().map(|d| d.ts_ns).max().unwrap();
    let mut s = String::new();
    let mut t = t0 - 1;
    while t <= t1 + 1_000_000_000 {
        for sym in ["EURUSD", "GBPUSD", "USDJPY"] {
            s.push_str(&format!("{t} CHECK {sym}\n"));
        }
        t += 250_000_000;
    }
    let path = dir.join("checks.txt");
    std::fs::write(&path, s).unwrap();
    path
}

fn answers(captures: &[&Path], checks: &Path, extra: &[&str]) -> String {
    let mut args = vec!["replay"];
    args.extend(captures.iter().map(|c| p(c)));
    args.extend(["--checks", p(checks)]);
    args.extend_from_slice(extra);
    String::from_utf8(ok(&args)).unwrap()
}

/// The `--json` summary without what names or orders the files.
fn summary(captures: &[&Path], extra: &[&str]) -> Value {
    let mut args = vec!["replay", "--json"];
    args.extend(captures.iter().map(|c| p(c)));
    args.extend_from_slice(extra);
    let mut v: Value = serde_json::from_slice(&ok(&args)).unwrap();
    let m = v.as_object_mut().unwrap();
    for k in [
        "capture",
        "captures",
        "compression",
        "sort",
        "sorted",
        "sorted_runs",
        "out_of_order",
    ] {
        m.remove(k);
    }
    v
}

#[test]
fn a_cat_merged_capture_replays_as_the_sorted_one() {
    let dir = tempfile::tempdir().unwrap();
    let all = simulated(dir.path());
    let (a, b) = lines(&all);
    // line A whole, then line B from 20 s back
    let cat: Vec<CapturedDatagram> = a.iter().chain(&b).cloned().collect();
    let want = reference(&[&cat]);
    let sorted = dir.path().join("sorted.pcap");
    write(&sorted, &want, Compression::None);
    let checks = checks_file(dir.path(), &all);
    let want_answers = answers(&[&sorted], &checks, &[]);
    assert!(want_answers.lines().count() > 200);
    let want_summary = summary(&[&sorted], &[]);
    for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let f = dir.path().join(format!("cat-{}", c.name()));
        write(&f, &cat, c);
        let (got, o) = streamed(std::slice::from_ref(&f), 64 << 20);
        assert!(got == want, "{c:?}: not a stable sort by time");
        assert_eq!(o["runs"], 2, "{c:?}");
        assert_eq!(o["sources"], 2, "{c:?}: one reader per run");
        assert_eq!(answers(&[&f], &checks, &[]), want_answers, "{c:?}");
        assert_eq!(summary(&[&f], &[]), want_summary, "{c:?}");
    }
}

#[test]
fn several_files_merge_in_time_order_then_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let all = simulated(dir.path());
    let (a, b) = lines(&all);
    let fa = dir.path().join("a.pcap.gz");
    let fb = dir.path().join("b.pcap.zst");
    write(&fa, &a, Compression::Gzip);
    write(&fb, &b, Compression::Zstd);
    let checks = checks_file(dir.path(), &all);
    for (files, parts) in [
        ([fa.clone(), fb.clone()], [&a[..], &b[..]]),
        ([fb.clone(), fa.clone()], [&b[..], &a[..]]),
    ] {
        let want = reference(&parts);
        let (got, o) = streamed(&files, 64 << 20);
        assert!(got == want, "{files:?}: not a stable sort by time");
        assert_eq!(o["runs"], 2);
        let sorted = dir.path().join("sorted.pcap");
        write(&sorted, &want, Compression::None);
        let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        assert_eq!(
            answers(&refs, &checks, &[]),
            answers(&[&sorted], &checks, &[]),
            "{files:?}"
        );
        assert_eq!(summary(&refs, &[]), summary(&[&sorted], &[]), "{files:?}");
    }
}

#[test]
fn equal_stamps_across_files_keep_the_files_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = |ts: i64, tag: u8| CapturedDatagram {
        ts_ns: ts,
        src: "10.0.0.1:5".parse().unwrap(),
        dst: "239.0.0.1:1".parse().unwrap(),
        payload: vec![tag; 3],
    };
    let one = [d(10, 1), d(10, 2), d(20, 3), d(10, 4)];
    let two = [d(10, 5), d(5, 6), d(20, 7)];
    let three = [d(20, 8), d(10, 9)];
    let paths: Vec<PathBuf> = ["1.pcap", "2.pcap.gz", "3.pcap.zst"]
        .iter()
        .map(|n| dir.path().join(n))
        .collect();
    write(&paths[0], &one, Compression::None);
    write(&paths[1], &two, Compression::Gzip);
    write(&paths[2], &three, Compression::Zstd);
    let (got, o) = streamed(&paths, 64 << 20);
    let tags: Vec<u8> = got.iter().map(|d| d.payload[0]).collect();
    assert_eq!(tags, [6, 1, 2, 4, 5, 9, 3, 7, 8]);
    assert_eq!(got, reference(&[&one, &two, &three]));
    // [10 10 20] [10], [10] [5 20], [20] [10]
    assert_eq!(o["runs"], 6);
}

#[test]
fn interleaved_thousands_of_times_spills_within_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let all = simulated(dir.path());
    let (a, b) = lines(&all);
    // blocks of 3 datagrams from each line in turn, line B 2 s behind:
    // every block goes back in time
    let b: Vec<CapturedDatagram> = b
        .into_iter()
        .map(|mut d| {
            d.ts_ns -= 2_000_000_000;
            d
        })
        .collect();
    let mut mixed = Vec::new();
    for (x, y) in a.chunks(3).zip(b.chunks(3)) {
        mixed.extend_from_slice(x);
        mixed.extend_from_slice(y);
    }
    let n = a.len().min(b.len()).div_ceil(3) * 3;
    mixed.extend_from_slice(&a[n.min(a.len())..]);
    mixed.extend_from_slice(&b[n.min(b.len())..]);
    let want = reference(&[&mixed]);
    let sorted = dir.path().join("sorted.pcap");
    write(&sorted, &want, Compression::None);
    let checks = checks_file(dir.path(), &want);
    let want_answers = answers(&[&sorted], &checks, &[]);
    // 1 MiB; 4 MiB for zstd, whose decoder alone holds a 2 MiB window
    for (c, mib) in [(Compression::None, 1), (Compression::Zstd, 4)] {
        let f = dir.path().join(format!("mixed-{}", c.name()));
        write(&f, &mixed, c);
        let bytes: usize = mixed.iter().map(|d| d.payload.len()).sum();
        assert!(bytes > 4 << 20, "{bytes} bytes of payload");
        let bound = mib << 20;
        let (got, o) = streamed(std::slice::from_ref(&f), bound);
        assert!(got == want, "{c:?}: not a stable sort by time");
        assert!(o["runs"].as_u64().unwrap() > 1000, "{o}");
        assert_eq!(o["chunked"], true, "{o}");
        assert!(o["spill_chunks"].as_u64().unwrap() >= 3, "{o}");
        assert!(o["peak_bytes"].as_u64().unwrap() <= bound as u64, "{o}");
        // the CLI with the same bound: spilled, and the sorted answers
        let mib = mib.to_string();
        assert_eq!(
            answers(&[&f], &checks, &["--sort-memory-mib", &mib]),
            want_answers,
            "{c:?}"
        );
        let v: Value =
            serde_json::from_slice(&ok(&["replay", "--json", "--sort-memory-mib", &mib, p(&f)]))
                .unwrap();
        assert_eq!(v["sort"]["spilled"], true);
        assert_eq!(v["sort"]["memory_bytes"], bound);
        assert!(v["sort"]["peak_bytes"].as_u64().unwrap() <= bound as u64);
        assert!(v["sort"]["spill_bytes"].as_u64().unwrap() >= bytes as u64);
    }
    // many chunks and a small fan-in: more than one merge pass
    let f = dir.path().join("mixed-none");
    let many: Vec<PathBuf> = (0..4).map(|_| f.clone()).collect();
    let (got, o) = streamed(&many, 1 << 20);
    let four: Vec<&[CapturedDatagram]> = (0..4).map(|_| &mixed[..]).collect();
    assert!(got == reference(&four));
    assert!(o["peak_bytes"].as_u64().unwrap() <= 1 << 20, "{o}");
}

/// A pipe at `path` fed with `data` by a thread (which ends when the
/// reader has it all or goes away).
fn pipe_with(path: &Path, data: Vec<u8>) -> std::thread::JoinHandle<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&path) {
            let _ = f.write_all(&data);
        }
    })
}

/// A sorted capture is read once, as it streams, so it replays from a pipe
/// too, with the answers of the file. One that is not in time order is
/// found out as it is read and read again from a first pass, said on
/// stderr, with the answers of the sorted one; from a pipe that cannot be
/// done, and the error says so.
#[test]
fn a_sorted_capture_is_read_once_and_an_unsorted_one_again() {
    let dir = tempfile::tempdir().unwrap();
    let all = simulated(dir.path());
    let sorted = dir.path().join("sorted.pcap");
    write(&sorted, &reference(&[&all]), Compression::None);
    let checks = checks_file(dir.path(), &all);
    let want = answers(&[&sorted], &checks, &[]);

    let fifo = dir.path().join("sorted.fifo");
    let feeder = pipe_with(&fifo, std::fs::read(&sorted).unwrap());
    let out = tickgate(&["replay", p(&fifo), "--checks", p(&checks)]);
    feeder.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
    assert!(!stderr.contains("reading again"), "{stderr}");

    let (a, b) = lines(&all);
    let cat: Vec<CapturedDatagram> = a.iter().chain(&b).cloned().collect();
    let cat_file = dir.path().join("cat.pcap");
    write(&cat_file, &cat, Compression::None);
    let resorted = dir.path().join("resorted.pcap");
    write(&resorted, &reference(&[&cat]), Compression::None);
    let out = tickgate(&["replay", p(&cat_file), "--checks", p(&checks)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("not in time order; reading again to put it in order"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        answers(&[&resorted], &checks, &[])
    );

    let fifo = dir.path().join("cat.fifo");
    let feeder = pipe_with(&fifo, std::fs::read(&cat_file).unwrap());
    let out = tickgate(&["replay", p(&fifo), "--checks", p(&checks)]);
    feeder.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("not a regular file") && stderr.contains("write it to a file first"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "answers given from a disordered pipe"
    );
}

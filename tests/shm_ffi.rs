//! The C ABI and the Python module: `include/tickgate.h` in step with
//! clients/c/src/lib.rs; a C program built with `cc` and the ctypes module
//! under `python3` both answer exactly as the socket does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tickgate::feed::verdict::{
    R_CROSSED, R_HALTED, R_NO_DATA, R_STALE_AT_SOURCE, R_STALE_QUOTE, R_SUSPECT, R_UNKNOWN_SYMBOL,
};
use tickgate::feed::{ClockOffset, FeedSettings, SuspectCause};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

#[path = "common/shm.rs"]
mod shm;
use shm::Rig;

const NOW: i64 = 1_764_489_600_000_000_000;
const MS: i64 = 1_000_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &str) -> String {
    std::fs::read_to_string(root().join(p)).unwrap()
}

/// `cargo build -p tickgate-c` once (same profile as this test); the
/// library's directory.
fn libdir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // target/<profile>/deps/<this test>
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let mut cmd = Command::new(env!("CARGO"));
        // Without the variables cargo set for this test (CARGO_PKG_*,
        // CARGO_MANIFEST_DIR, ...): the build is then the one a shell
        // would run, and reuses its artifacts instead of rebuilding. The
        // user's CARGO_HOME and CARGO_TARGET_DIR stay: the library must
        // land in this test's target directory.
        let keep =
            |k: &str| !k.starts_with("CARGO_") || k == "CARGO_HOME" || k == "CARGO_TARGET_DIR";
        cmd.env_clear()
            .envs(std::env::vars().filter(|(k, _)| keep(k)))
            .current_dir(root())
            .args(["build", "-p", "tickgate-c"]);
        if dir.file_name().unwrap() == "release" {
            cmd.arg("--release");
        }
        let st = cmd.status().unwrap();
        assert!(st.success(), "cargo build -p tickgate-c failed");
        assert!(dir.join("libtickgate.so").exists());
        dir
    })
}

/// `name` words of `text` after `prefix` up to `(`: declared functions.
fn names_after(text: &str, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let at = l.find(prefix)? + prefix.len();
            let rest = &l[at..];
            let end = rest.find('(')?;
            let name = rest[..end].trim_start_matches('*').trim();
            name.starts_with("tickgate_").then(|| name.to_string())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn header_is_in_step_with_the_library() {
    let h = read("include/tickgate.h");
    let rs = read("clients/c/src/lib.rs");
    // Functions: every exported one declared, nothing else.
    let exported = {
        let mut v = names_after(&rs, "extern \"C\" fn ");
        v.dedup();
        v
    };
    let declared: Vec<String> = {
        let mut v: Vec<String> = h
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim_start().starts_with('*'))
            .filter_map(|l| {
                let end = l.find('(')?;
                let name = l[..end].rsplit([' ', '*']).next()?;
                name.starts_with("tickgate_").then(|| name.to_string())
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(exported, declared);
    assert!(exported.len() >= 8);
    // The answer struct: same fields, same order, same widths.
    let rust_fields: Vec<(String, String)> = {
        let body = &rs[rs.find("pub struct tickgate_answer {").unwrap()..];
        let body = &body[..body.find('}').unwrap()];
        body.lines()
            .filter_map(|l| {
                let l = l.trim().strip_prefix("pub ")?;
                let (n, t) = l.trim_end_matches(',').split_once(": ")?;
                // `[u8; 64]` is C's `uint8_t name[64]`.
                let (t, n) = match t.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                    Some(arr) => {
                        let (t, len) = arr.split_once("; ").unwrap();
                        (t, format!("{n}[{len}]"))
                    }
                    None => (t, n.to_string()),
                };
                let c = match t {
                    "u8" => "uint8_t",
                    "i32" => "int32_t",
                    "u32" => "uint32_t",
                    "i64" => "int64_t",
                    "u64" => "uint64_t",
                    other => panic!("type {other} has no C twin here"),
                };
                Some((c.to_string(), n))
            })
            .collect()
    };
    let c_fields: Vec<(String, String)> = {
        let body = &h[h.find("typedef struct tickgate_answer {").unwrap()..];
        let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
        body.lines()
            .filter_map(|l| {
                let decl = l.split(';').next()?.trim();
                let (t, n) = decl.split_once(' ')?;
                Some((t.to_string(), n.trim().to_string()))
            })
            .collect()
    };
    assert_eq!(rust_fields, c_fields);
    // Constants: the library's and the core's values.
    let define = |name: &str| -> i64 {
        let l = h
            .lines()
            .find(|l| l.starts_with(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("{name} not defined"));
        l.split_whitespace()
            .nth(2)
            .unwrap()
            .trim_matches(['(', ')'])
            .parse()
            .unwrap()
    };
    for l in rs.lines().filter(|l| l.starts_with("pub const TICKGATE_")) {
        let (name, value) = l["pub const ".len()..].split_once(':').unwrap();
        let value: i64 = value
            .split('=')
            .nth(1)
            .unwrap()
            .trim()
            .trim_end_matches(';')
            .parse()
            .unwrap();
        assert_eq!(define(name), value, "{name}");
    }
    // The feed limit: the header's, and the Python client's, is the core's.
    assert_eq!(
        define("TICKGATE_MAX_FEEDS"),
        tickgate::feed::across::MAX_FEEDS as i64
    );
    let py = read("clients/python/tickgate.py");
    assert!(
        py.lines()
            .any(|l| l == format!("MAX_FEEDS = {}", tickgate::feed::across::MAX_FEEDS)),
        "clients/python/tickgate.py: MAX_FEEDS is not the core's"
    );
    for (name, bit) in [
        ("UNKNOWN_SYMBOL", R_UNKNOWN_SYMBOL),
        ("NO_DATA", R_NO_DATA),
        ("STALE_QUOTE", R_STALE_QUOTE),
        ("STALE_AT_SOURCE", R_STALE_AT_SOURCE),
        ("HALTED", R_HALTED),
        ("SUSPECT", R_SUSPECT),
        ("CROSSED", R_CROSSED),
    ] {
        assert_eq!(define(&format!("TICKGATE_R_{name}")), bit as i64, "{name}");
    }
    for c in 0..=7u8 {
        let cause = SuspectCause::from_u8(c);
        let name = match cause {
            SuspectCause::None => "NONE".to_string(),
            other => other.as_str().to_uppercase(),
        };
        assert_eq!(define(&format!("TICKGATE_CAUSE_{name}")), c as i64);
    }
}

fn sym(s: &str) -> Symbol {
    Symbol::parse(s).unwrap()
}

/// Fresh, stale, negative price, one-sided, no data, unknown; and symbols
/// on two feeds (gate.md "One symbol on several feeds": `EURUSD` on both,
/// crossed between them for long; `SPREAD` stale on the second).
fn market() -> (Rig, Vec<&'static str>) {
    let settings = FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: 100,
        ..FeedSettings::default()
    };
    let mut rig = Rig::new(&[("md1", settings), ("md2", settings)]);
    for (i, (s, age_ms, bid, ask)) in [
        (
            "EURUSD",
            300,
            Some((1_085_160_000, 5)),
            Some((1_085_170_000, 9)),
        ),
        ("SPREAD", 900, Some((-500_000_000, 2)), None),
        (
            "CROSSED",
            100,
            Some((2_000_000_000, 1)),
            Some((2_100_000_000, 1)),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let side = |x: Option<(i64, u64)>| x.map(|(px, qty)| Side { px, qty });
        let q = Quote::new(sym(s), 3, (NOW - age_ms * MS) as u64, side(bid), side(ask));
        let mut b = PacketBuilder::new();
        b.start(SessionId::parse("S2").unwrap(), i as u64 + 1)
            .quote(&q);
        rig.feeds[1].on_datagram(0, b.bytes(), NOW - age_ms * MS + 10 * MS);
    }
    let f = &mut rig.feeds[0];
    f.add_symbol(sym("USDJPY")).unwrap();
    // gate.md: symbols of up to 20 characters (CME's); known, no data.
    f.add_symbol(sym("ESM6-ESU6-ESZ6-ESH7X")).unwrap();
    f.add_symbol(sym("ESM6-ESU6-ESZ6-ESH7Y")).unwrap();
    let quotes = [
        (
            "EURUSD",
            41,
            150,
            Some((1_085_120_000, 1_000_000)),
            Some((1_085_150_000, 7)),
        ),
        ("GBPUSD", 7, 3000, None, Some((1_270_000_000, 1))),
        ("SPREAD", 9, 10, Some((-500_000_000, 3)), Some((0, 4))),
        ("AUDUSD", 2, 100, Some((650_000_000, 2)), None),
        (
            "CROSSED",
            5,
            200,
            Some((1_000_000_000, 1)),
            Some((1_900_000_000, 1)),
        ),
    ];
    for (i, (s, seq, age_ms, bid, ask)) in quotes.into_iter().enumerate() {
        let side = |x: Option<(i64, u64)>| x.map(|(px, qty)| Side { px, qty });
        let q = Quote::new(
            sym(s),
            seq,
            (NOW - age_ms * MS) as u64,
            side(bid),
            side(ask),
        );
        let mut b = PacketBuilder::new();
        b.start(SessionId::parse("S1").unwrap(), i as u64 + 1)
            .quote(&q);
        f.on_datagram(0, b.bytes(), NOW - age_ms * MS + 50 * MS);
    }
    (
        rig,
        vec![
            "EURUSD",
            "CROSSED",
            "GBPUSD",
            "SPREAD",
            "AUDUSD",
            "USDJPY",
            "NOPE",
            "TOOLONGSYM",
            "ESM6-ESU6-ESZ6-ESH7X",
            "ESM6-ESU6-ESZ6-ESH7Y",
            "ESM6-ESU6-ESZ6-ESH7Z",
            "ESM6-ESU6-ESZ6-ESH7XY",
        ],
    )
}

/// Compiles `clients/c/tests/<name>.c` against the header and the library.
fn compile_c(name: &str, out_dir: &Path) -> PathBuf {
    let dir = libdir();
    let exe = out_dir.join(name);
    let st = Command::new("cc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_DEFAULT_SOURCE",
            "-I",
        ])
        .arg(root().join("include"))
        .arg(root().join(format!("clients/c/tests/{name}.c")))
        .arg("-L")
        .arg(dir)
        .arg("-ltickgate")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("cc runs");
    assert!(st.success(), "{name}.c compiles against tickgate.h");
    exe
}

#[test]
fn c_program_answers_as_the_socket() {
    let (rig, symbols) = market();
    let exe = compile_c("check", rig.dir.path());
    rig.now.store(NOW, std::sync::atomic::Ordering::SeqCst);
    let mut args: Vec<String> = symbols.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "EURUSD 50 -1",
            "EURUSD 200 100",
            "GBPUSD -1 5000",
            "EURUSD 99999 -1",
            "EURUSD -1 -1 md2",
            "CROSSED 50 -1 md1",
            "EURUSD -1 -1 nofeed",
        ]
        .map(String::from),
    );
    let out = Command::new(&exe)
        .arg(&rig.shm)
        .arg(&rig.sock)
        .arg(NOW.to_string())
        .args(&args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(
        stdout.trim(),
        format!("{} checks, 0 mismatches", args.len())
    );
}

/// A FIFO and a symbolic link at the path are refused without blocking, a
/// `now_ns` that is not the wall clock in ns is refused, and so is a cause
/// no check gives.
#[test]
fn c_library_refuses_fifos_links_and_clocks_that_are_not_realtime() {
    let (rig, _) = market();
    let exe = compile_c("refuse", rig.dir.path());
    let fifo = rig.dir.path().join("fifo.shm");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Held open for writing: a client opening it the old way (blocking,
    // for reading) then returns, and fails later with another message;
    // without a writer, that open never returns.
    let _writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let link = rig.dir.path().join("link.shm");
    std::os::unix::fs::symlink(&rig.shm, &link).unwrap();
    let out = Command::new(&exe)
        .arg(&rig.shm)
        .arg(&fifo)
        .arg(&link)
        .arg(NOW.to_string())
        .arg("EURUSD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "0 failures");
}

#[test]
fn python_module_answers_as_the_socket() {
    let dir = libdir();
    let (rig, symbols) = market();
    rig.now.store(NOW, std::sync::atomic::Ordering::SeqCst);
    let out = Command::new("python3")
        .arg(root().join("clients/python/test_tickgate.py"))
        .env("TICKGATE_LIB", dir.join("libtickgate.so"))
        .env("TICKGATE_TEST_SHM", &rig.shm)
        .env("TICKGATE_TEST_SOCK", &rig.sock)
        .env("TICKGATE_TEST_NOW", NOW.to_string())
        .env("TICKGATE_TEST_SYMBOLS", symbols.join(","))
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Ran 3 tests"), "{stderr}");
}

/// The Python client is an installable package: `pip install
/// ./clients/python` into a fresh virtual environment (build isolation:
/// pip fetches setuptools from the package index), then the installed
/// module, imported from outside the source tree, answers as the socket.
#[test]
fn python_package_installs_into_a_clean_venv_and_answers_as_the_socket() {
    let dir = libdir();
    let (mut rig, symbols) = market();
    let tmp = tempfile::tempdir().unwrap();
    // A copy: setuptools writes build/ and *.egg-info beside the sources.
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    for f in ["pyproject.toml", "README.md", "tickgate.py"] {
        std::fs::copy(root().join("clients/python").join(f), pkg.join(f)).unwrap();
    }
    let venv = tmp.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .expect("python3 runs");
    if !made.status.success() {
        eprintln!(
            "SKIPPED python_package_installs: no venv module: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        return;
    }
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(&pkg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&pip.stderr);
    if !pip.status.success() {
        // Only an unreachable package index (for setuptools) is a skip.
        let offline = [
            "Could not find a version",
            "NewConnectionError",
            "Network is unreachable",
        ];
        assert!(
            offline.iter().any(|o| err.contains(o)),
            "pip install failed: {err}"
        );
        eprintln!("SKIPPED python_package_installs: no package index: {err}");
        return;
    }
    let script = r#"
import os, sys, tickgate
assert "site-packages" in tickgate.__file__, tickgate.__file__
now = int(os.environ["NOW"])
with tickgate.Client(os.environ["SHM"]) as c:
    for sym in os.environ["SYMBOLS"].split(","):
        sys.stdout.write(c.check(sym, now_ns=now).line)
"#;
    let out = Command::new(venv.join("bin/python"))
        .args(["-c", script])
        .current_dir(tmp.path())
        .env("TICKGATE_LIB", dir.join("libtickgate.so"))
        .env("SHM", &rig.shm)
        .env("NOW", NOW.to_string())
        .env("SYMBOLS", symbols.join(","))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8(out.stdout).unwrap();
    let want: String = symbols
        .iter()
        .map(|s| rig.socket_answer(&format!("CHECK {s}"), NOW))
        .collect();
    assert_eq!(got, want);
    assert!(got.contains(" feeds=md1:"), "a symbol on two feeds: {got}");
}

//! The README's examples work exactly as written: every `$ command` line of
//! README.md (an indented code line) is run with `sh` in a fresh directory
//! (with `fixtures/` linked in) and its standard output compared with the
//! lines the README shows under it.
//!
//! - `$ cat FILE` is run as any command: FILE must be one the tour ships
//!   (`fixtures/`) or one an earlier command made.
//! - `$ tickgate demo ...` is run for a few seconds (`--seconds`, on ports
//!   of its own) and what it prints is compared as a live command's
//!   output (below): the demo lines the README quotes.
//! - `$ tickgate demo` itself runs until Ctrl-C: the
//!   commands that talk to the demo (its socket `./tickgate-data/gate.sock`
//!   or its fills API `http://127.0.0.1:8088`) are run against a demo this
//!   test starts in the same directory, on ports it lets the demo choose
//!   (`--port`, `--metrics 127.0.0.1:0`, `--fills 127.0.0.1:0`, the
//!   address substituted into the command), so that the test can run
//!   beside other demos. Their output has live numbers: it is compared
//!   with every number replaced by `#` and spaces collapsed.
//! - A line `...` stands for any lines; `...` inside a line for any text.
//! - Everything else (simulate, replay, fills apply) is deterministic and
//!   compared exactly.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Example {
    line: usize,
    command: String,
    output: Vec<String>,
}

fn examples(readme: &str) -> Vec<Example> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(cmd) = lines[i].strip_prefix("    $ ") {
            let mut output = Vec::new();
            let mut j = i + 1;
            while j < lines.len() && lines[j].starts_with("    ") && !lines[j].starts_with("    $ ")
            {
                output.push(lines[j][4..].to_string());
                j += 1;
            }
            out.push(Example {
                line: i + 1,
                command: cmd.to_string(),
                output,
            });
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Every number as `#`, runs of spaces as one.
fn loose(s: &str) -> String {
    let mut out = String::new();
    let mut in_num = false;
    for c in s.chars() {
        if c.is_ascii_digit() || (in_num && c == '.') {
            if !in_num {
                out.push('#');
            }
            in_num = true;
        } else {
            in_num = false;
            out.push(c);
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `want` (with `...` for any text) matches `got`.
fn line_matches(want: &str, got: &str) -> bool {
    if !want.contains("...") {
        return want == got;
    }
    let pieces: Vec<&str> = want.split("...").map(str::trim).collect();
    let mut rest = got;
    for (k, p) in pieces.iter().enumerate() {
        if p.is_empty() {
            continue;
        }
        match rest.find(p) {
            Some(0) => rest = &rest[p.len()..],
            Some(at) if k > 0 => rest = &rest[at + p.len()..],
            _ => return false,
        }
    }
    true
}

/// The shown lines against the real ones (`...` alone: any lines).
fn compare(want: &[String], got: &[String]) -> Result<(), String> {
    let mut g = 0;
    let mut skipping = false;
    for w in want {
        if w.trim() == "..." {
            skipping = true;
            continue;
        }
        loop {
            let Some(line) = got.get(g) else {
                return Err(format!("missing {w:?}"));
            };
            g += 1;
            if line_matches(w, line) {
                skipping = false;
                break;
            }
            if !skipping {
                return Err(format!("want {w:?}\n got {line:?}"));
            }
        }
    }
    if !skipping && g < got.len() {
        return Err(format!("unexpected {:?}", got[g]));
    }
    Ok(())
}

struct Demo {
    child: Child,
    fills: String,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_demo(dir: &Path, bin: &Path) -> Demo {
    // A port of our own (the demo moves on by itself if it is taken).
    let port = 42000 + (std::process::id() % 4000) as u16;
    let mut child = Command::new(bin)
        .args(["demo", "--seconds", "120", "--metrics", "127.0.0.1:0"])
        .args(["--fills", "127.0.0.1:0", "--port", &port.to_string()])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut fills = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.split_once("): http://") {
            fills = Some(format!(
                "http://{}",
                rest.1.split('/').next().unwrap().trim_end_matches(',')
            ));
        }
        if line.contains("Ctrl-C stops") {
            break;
        }
    }
    // Keep reading its status lines so that it never blocks on stdout.
    std::thread::spawn(move || lines.for_each(drop));
    let demo = Demo {
        child,
        fills: fills.expect("the demo printed its fills address"),
    };
    // Ready once EURUSD checks OK.
    let t0 = Instant::now();
    loop {
        let ok = Command::new(bin)
            .args(["check", "EURUSD", "--socket", "./tickgate-data/gate.sock"])
            .current_dir(dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the demo never answered OK"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    demo
}

/// A demo command of the README as the test runs it: for a few seconds,
/// on a port of its own (it moves on by itself if that one is taken),
/// metrics on an ephemeral port, the fills lane on one too (the default
/// venue) or off.
fn demo_command(command: &str) -> String {
    let port = 46000 + (std::process::id() % 1000) as u16 * 3;
    let venue = command.contains("--venue");
    let seconds = if command.contains("nasdaq-itch") {
        8
    } else {
        3
    };
    format!(
        "{command} --seconds {seconds} --port {} --metrics 127.0.0.1:0 {}",
        port + u16::from(venue) + u16::from(command.contains("cme-mdp3")),
        if venue {
            "--no-fills"
        } else {
            "--fills 127.0.0.1:0"
        }
    )
}

#[test]
fn every_readme_example_works_as_written() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tickgate"));
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root.join("fixtures"), dir.path().join("fixtures")).unwrap();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut demo: Option<Demo> = None;
    // The demos run here, apart from the one the live commands talk to.
    let demo_dir = tempfile::tempdir().unwrap();
    let mut ran = 0;
    let mut failures = Vec::new();
    for ex in examples(&readme) {
        let is_demo = ex.command.starts_with("tickgate demo");
        let live = is_demo
            || ex.command.contains("./tickgate-data/gate.sock")
            || ex.command.contains("http://127.0.0.1:8088");
        let mut command = ex.command.clone();
        if is_demo {
            command = demo_command(&command);
        } else if live {
            let d = demo.get_or_insert_with(|| start_demo(dir.path(), &bin));
            command = command.replace("http://127.0.0.1:8088", &d.fills);
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(if is_demo { demo_dir.path() } else { dir.path() })
            .env("PATH", &path)
            .env_remove("TICKGATE_SOCKET")
            .output()
            .unwrap();
        let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        let result = if live {
            let want: Vec<String> = ex.output.iter().map(|l| loose(l)).collect();
            let got: Vec<String> = got.iter().map(|l| loose(l)).collect();
            compare(&want, &got)
        } else {
            compare(&ex.output, &got)
        };
        if let Err(e) = result {
            failures.push(format!(
                "README.md line {}: $ {}\n{e}\nstdout:\n{}\nstderr: {}",
                ex.line,
                ex.command,
                got.join("\n"),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        ran += 1;
    }
    assert!(ran >= 10, "only {ran} examples found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

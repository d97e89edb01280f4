//! `tickgate replay --timeline`: the IEX sample day of fixtures/real/
//! drawn as HTML, SVG and PNG; what the picture shows is checked against
//! the facts of iex-tops16-sample.expect (MILL halted from 14:33:55 UTC,
//! every session ended at the end), and the HTML is opened in headless
//! Chromium where it is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/cli.rs"]
mod cli;
use cli::tickgate;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The colours of the legend, as render.rs writes them.
const HALTED: &str = "#803CAF";
const SESSION_ENDED: &str = "#323232";
const OK: &str = "#2EA043";
const NO_DATA: &str = "#C8C8C8";

fn timeline(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, String) {
    let out = dir.join(name);
    let mut args = vec![
        "replay".to_string(),
        fixture("iex-tops16-sample.pcap.gz"),
        "--venue".into(),
        "iex-tops".into(),
        "--timeline".into(),
        out.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let (code, _, err) = tickgate(&args);
    assert_eq!(code, 0, "{err}");
    (out, err)
}

/// Tags balance (a small well-formedness check: every element closed in
/// order, attribute values quoted, no stray `<`).
fn assert_well_formed(xml: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("a tag is closed");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{tag}>"
        );
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack.pop().expect("a closing tag has its opening");
            assert_eq!(open, name.trim(), "closing </{name}> for <{open}>");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap().to_string();
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

/// The `<svg ...>...</svg>` of a page.
fn svg_of(html: &str) -> &str {
    let a = html.find("<svg").expect("inline SVG");
    let b = html.rfind("</svg>").expect("SVG closed") + "</svg>".len();
    &html[a..b]
}

/// A symbols-table row of the HTML page, without the colour swatches.
fn symbol_row(html: &str, sym: &str) -> String {
    let start = format!("<tr><td>{sym}</td>");
    let a = html.find(&start).unwrap_or_else(|| panic!("{sym} row"));
    let b = a + html[a..].find("</tr>").unwrap();
    let mut s = html[a..b].to_string();
    while let Some(i) = s.find("<span") {
        let j = i + s[i..].find("</span>").unwrap() + "</span>".len();
        s.replace_range(i..j, "");
    }
    s
}

#[test]
fn the_iex_day_as_html_shows_the_halts_and_the_end_and_checks_answer_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("iex.html");
    let (code, answers, err) = tickgate(&[
        "replay",
        &fixture("iex-tops16-sample.pcap.gz"),
        "--venue",
        "iex-tops",
        "--checks",
        &fixture("iex-tops16-sample.checks"),
        "--timeline",
        out.to_str().unwrap(),
        "--symbol",
        "MILL",
        "--symbol",
        "ZEUS",
        "--symbol",
        "AAPL",
        "--symbol",
        "NOPE",
    ]);
    assert_eq!(code, 0, "{err}");
    // The timeline changes no answer.
    let expect = std::fs::read_to_string(fixture("iex-tops16-sample.expect")).unwrap();
    assert_eq!(answers, expect);
    assert!(err.contains("timeline: 4 symbols drawn (chosen with --symbol) of 7799 known to the feeds, 7795 not drawn"), "{err}");
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Self-contained: no script, nothing fetched (the SVG namespace is a
    // name, not a fetch).
    assert!(!html.contains("<script"));
    assert!(!html.contains("<link"));
    assert!(!html.contains("@import"));
    assert!(!html
        .replace("http://www.w3.org/2000/svg", "")
        .contains("http"));
    let svg = svg_of(&html);
    assert_well_formed(svg);
    for sym in ["MILL", "ZEUS", "AAPL", "NOPE"] {
        assert!(
            svg.contains(&format!(">\n{sym}\n<")) || svg.contains(&format!(">{sym}<")),
            "{sym} labelled"
        );
    }
    for reason in [
        "ok",
        "no_data",
        "stale_quote",
        "stale_at_source",
        "halted",
        "suspect=channel_gap",
        "suspect=session_ended",
        "suspect=recovering",
    ] {
        assert!(
            html.contains(&format!("<td>{reason}</td>")),
            "legend {reason}"
        );
        assert!(svg.contains(reason), "SVG legend {reason}");
    }
    for c in [HALTED, SESSION_ENDED, OK, NO_DATA] {
        assert!(svg.contains(&format!("fill=\"{c}\"")), "colour {c} drawn");
    }
    // expect: MILL OK at 14:33:55.2105, halted at 14:33:55.2108 (UTC):
    // its halted buckets start with the one holding that time.
    let mill = symbol_row(&html, "MILL");
    let halted = mill.find(" halted from ").expect("MILL halted");
    let from = &mill[halted + " halted from ".len()..][..12];
    assert!(("14:33:54.000".."14:33:55.211").contains(&from), "{mill}");
    // expect: every symbol suspect=session_ended at the end.
    for sym in ["MILL", "ZEUS", "AAPL"] {
        let row = symbol_row(&html, sym);
        assert!(row.contains("suspect=session_ended from 14:38:5"), "{row}");
        assert!(row.contains("the start"), "{row}");
    }
    // ZEUS halted too (expect: from 14:34:25).
    assert!(symbol_row(&html, "ZEUS").contains(" halted from 14:34:2"));
    // A symbol no feed knows: no data throughout.
    let nope = symbol_row(&html, "NOPE");
    assert!(nope.contains("no_data from 14:32:18"), "{nope}");
    assert!(!nope.contains(" ok from"), "{nope}");
    // The feed events: the one session end.
    assert!(svg.contains("1 session ends"), "events");
    assert!(html.contains("packets per second per line"));
    assert!(html.contains("clock offset"));
}

#[test]
fn the_busiest_are_drawn_by_default_and_the_rest_said_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = timeline(dir.path(), "busy.svg", &["--timeline-symbols", "5"]);
    assert!(
        err.contains("timeline: 5 symbols drawn (the busiest by updates) of 7799 known to the feeds, 7794 not drawn"),
        "{err}"
    );
    let svg = std::fs::read_to_string(out).unwrap();
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"));
    assert_well_formed(&svg);
    // The busiest by updates in this sample (Quote Updates).
    assert!(svg.contains("FB"), "FB drawn");
    assert!(svg.contains(&format!("fill=\"{OK}\"")));
}

#[test]
fn the_png_decodes_and_is_not_blank() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = timeline(
        dir.path(),
        "iex.png",
        &["--symbol", "MILL", "--symbol", "AAPL"],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&out).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.width, 1400);
    assert!(info.height > 600, "{}", info.height);
    let px = &buf[..info.buffer_size()];
    let step = info.color_type.samples();
    let colours: std::collections::HashSet<&[u8]> = px.chunks(step).collect();
    assert!(colours.len() > 20, "{} colours", colours.len());
    // The halted purple and the OK green are painted.
    for c in [[128u8, 60, 175], [46, 160, 67]] {
        assert!(px.chunks(step).any(|p| p[..3] == c), "{c:?} painted");
    }
}

#[test]
fn an_unknown_extension_is_refused_before_replaying() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("iex.pdf");
    let (code, _, err) = tickgate(&[
        "replay",
        &fixture("iex-tops16-sample.pcap.gz"),
        "--timeline",
        out.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("must end in .html, .svg or .png"), "{err}");
    assert!(!out.exists());
    let (code, _, err) = tickgate(&[
        "replay",
        &fixture("iex-tops16-sample.pcap.gz"),
        "--timeline",
        dir.path().join("x.svg").to_str().unwrap(),
        "--symbol",
        "TOOLONGSYMBOLTOOLONGSYM",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--symbol \"TOOLONGSYMBOLTOOLONGSYM\": not a symbol (1 to 20"),
        "{err}"
    );
}

#[test]
fn chromium_renders_the_html() {
    let chromium = ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(chromium) = chromium else {
        println!("SKIPPED: no chromium here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (html, _) = timeline(dir.path(), "iex.html", &["--timeline-symbols", "8"]);
    let shot = dir.path().join("shot.png");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            &format!("--user-data-dir={}", dir.path().join("profile").display()),
            &format!("--screenshot={}", shot.display()),
            "--window-size=1450,1600",
            &format!("file://{}", html.display()),
        ])
        .output()
        .unwrap();
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Ok(keep) = std::env::var("TICKGATE_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    let px = &buf[..info.buffer_size()];
    let colours: std::collections::HashSet<&[u8]> = px.chunks(step).collect();
    assert!(colours.len() > 20, "{} colours: blank page?", colours.len());
    // The legend's OK green is on the page.
    assert!(px.chunks(step).any(|p| p[..3] == [46, 160, 67]));
}

//! The module layering: arrows point down only.
//! - The core (`src/wire`, `src/venue`, `src/feed`, `src/client`) names
//!   nothing above it: not `gate`, `capture`, `replay`, `sim`, `daemon`,
//!   `metrics`, `fills`, `config` nor `net`, outside `#[cfg(test)]` code.
//! - `metrics` and the gate server do not import each other both ways: one
//!   exposes its counters, the other reads them.
//! - `capture` (the file formats) names neither `replay` nor `sim`, which
//!   build on it; `sim` names no `replay` (`replay --send` uses `sim::live`).
//!
//! The sources are scanned as text: comments and string literals are
//! blanked, `#[cfg(test)]` items are dropped, and every path starting with
//! `crate::` or `super::` (also inside `use crate::{...}` groups) is
//! resolved to the module it names.

use std::path::{Path, PathBuf};

const CORE: &[&str] = &["wire", "venue", "feed", "client"];
const ABOVE: &[&str] = &[
    "gate", "capture", "replay", "sim", "daemon", "metrics", "fills", "config", "net",
];

/// `src` with comments, string and char literals replaced by spaces
/// (newlines kept), so that braces and paths in them do not count.
fn blank(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let keep = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    while i < c.len() {
        let at = |j: usize| c.get(j).copied();
        if c[i] == '/' && at(i + 1) == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(keep(c[i]));
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (at(i + 1) == Some('"') || at(i + 1) == Some('#'))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // Raw string r"..." or r#"..."#.
            let mut hashes = 0;
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.extend(c[i..j].iter().map(|&ch| keep(ch)));
            i = j;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            let j = (j + 1).min(c.len());
            out.extend(c[i..j].iter().map(|&ch| keep(ch)));
            i = j;
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a).
            let end = if at(i + 1) == Some('\\') {
                (i + 2..c.len()).find(|&j| c[j] == '\'').map(|j| j + 1)
            } else if at(i + 2) == Some('\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(j) => {
                    out.extend(c[i..j].iter().map(|&ch| keep(ch)));
                    i = j;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Code (already blanked) without its `#[cfg(test)]` items: the attribute
/// and the item after it, up to its `;` or its balanced `{ ... }`.
fn strip_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, ch) in after.char_indices() {
            match ch {
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        // Keep the line count, for the messages.
        out.extend(after[..end].chars().filter(|&c| c == '\n'));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Splits `s` at commas outside braces.
fn top_level_items(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0, 0, Vec::new());
    for (k, ch) in s.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
}

/// The paths a `use` tree (or plain path) starting at `text` names under
/// `prefix`: `a::b`, `a::{b, c::d}`, `{a, b}`.
fn expand(prefix: &[String], text: &str, out: &mut Vec<Vec<String>>) {
    let text = text.trim_start();
    if let Some(inner) = text.strip_prefix('{') {
        let mut depth = 1;
        let close = inner
            .char_indices()
            .find(|&(_, ch)| {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(inner.len(), |(k, _)| k);
        for item in top_level_items(&inner[..close]) {
            if !item.trim().is_empty() {
                expand(prefix, item, out);
            }
        }
        return;
    }
    let len = text.find(|c: char| !is_ident(c)).unwrap_or(text.len());
    if len == 0 {
        return;
    }
    let mut path = prefix.to_vec();
    let ident = &text[..len];
    if ident != "self" {
        path.push(ident.to_string());
    }
    let after = text[len..].trim_start();
    match after.strip_prefix("::") {
        Some(more) => expand(&path, more, out),
        None => out.push(path),
    }
}

/// Every module path (from the crate root) that the non-test code of the
/// file of module `module` names through `crate::` or `super::`.
fn crate_paths(module: &[&str], src: &str) -> Vec<(usize, Vec<String>)> {
    let code = strip_test_items(&blank(src));
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let starts_word = i == 0 || !is_ident(bytes[i - 1] as char);
        let rest = &code[i..];
        let (mut base, mut after) = if starts_word && rest.starts_with("crate") {
            (Some(Vec::new()), &rest[5..])
        } else if starts_word && rest.starts_with("super") {
            (
                Some(module[..module.len().saturating_sub(1)].to_vec()),
                &rest[5..],
            )
        } else {
            (None, rest)
        };
        let Some(mut resolved) = base.take() else {
            i += 1;
            continue;
        };
        // Further `::super` segments climb more.
        loop {
            let t = after.trim_start();
            match t.strip_prefix("::").map(str::trim_start) {
                Some(s) if s.starts_with("super") && !s[5..].starts_with(is_ident) => {
                    resolved.pop();
                    after = &s[5..];
                }
                _ => break,
            }
        }
        if let Some(tree) = after.trim_start().strip_prefix("::") {
            let line = code[..i].matches('\n').count() + 1;
            let prefix: Vec<String> = resolved.iter().map(|s| s.to_string()).collect();
            let mut paths = Vec::new();
            expand(&prefix, tree, &mut paths);
            out.extend(paths.into_iter().map(|p| (line, p)));
        }
        // Past `crate`/`super` and any `::super` that followed.
        i += rest.len() - after.len();
    }
    out
}

/// The module path of a source file: `src/feed/reader.rs` is
/// `feed::reader`, `src/feed/mod.rs` is `feed`.
fn module_of(src_dir: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src_dir).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().map(String::as_str) == Some("mod") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The paths the file names, each with its line.
fn named_by(src_dir: &Path, file: &Path) -> Vec<(usize, Vec<String>)> {
    let module = module_of(src_dir, file);
    let module: Vec<&str> = module.iter().map(String::as_str).collect();
    crate_paths(&module, &std::fs::read_to_string(file).unwrap())
}

fn names(paths: &[(usize, Vec<String>)], target: &[&str]) -> bool {
    paths
        .iter()
        .any(|(_, p)| p.len() >= target.len() && p.iter().zip(target).all(|(a, b)| a == b))
}

#[test]
fn the_core_imports_nothing_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for m in CORE {
        rust_files(&src.join(m), &mut files);
    }
    files.sort();
    assert!(files.len() > 20, "the core's files: {files:?}");
    let mut violations = Vec::new();
    for file in &files {
        for (line, path) in named_by(&src, file) {
            if path.first().is_some_and(|m| ABOVE.contains(&m.as_str())) {
                violations.push(format!(
                    "{}:{line}: names crate::{}",
                    file.strip_prefix(&src).unwrap().display(),
                    path.join("::")
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the core names modules above it:\n{}",
        violations.join("\n")
    );
}

#[test]
fn metrics_and_the_gate_server_do_not_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let metrics = named_by(&src, &src.join("metrics.rs"));
    let server = named_by(&src, &src.join("gate/server.rs"));
    let metrics_reads_server = names(&metrics, &["gate", "server"]);
    let server_reads_metrics = names(&server, &["metrics"]);
    assert!(
        !(metrics_reads_server && server_reads_metrics),
        "metrics.rs imports gate::server and gate/server.rs imports metrics"
    );
}

#[test]
fn captures_sit_below_the_replay_and_the_simulators() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for (below, above) in [
        ("capture", &["replay", "sim"][..]),
        ("sim", &["replay"][..]),
    ] {
        let mut files = Vec::new();
        rust_files(&src.join(below), &mut files);
        files.sort();
        assert!(!files.is_empty(), "no files in src/{below}");
        for file in &files {
            for (line, path) in named_by(&src, file) {
                if path.first().is_some_and(|m| above.contains(&m.as_str())) {
                    violations.push(format!(
                        "{}:{line}: names crate::{}",
                        file.strip_prefix(&src).unwrap().display(),
                        path.join("::")
                    ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "a lower module names one above it:\n{}",
        violations.join("\n")
    );
}

/// The scanner itself, on made-up sources.
#[test]
fn the_scanner_finds_every_form() {
    let found = |module: &[&str], src: &str| -> Vec<String> {
        crate_paths(module, src)
            .into_iter()
            .map(|(_, p)| p.join("::"))
            .collect()
    };
    let feed = ["feed", "reader"];
    assert_eq!(
        found(&feed, "use crate::gate::protocol::X;"),
        ["gate::protocol::X"]
    );
    assert_eq!(
        found(
            &feed,
            "use crate::{feed::view, gate::{protocol::{A, B}, server}};"
        ),
        [
            "feed::view",
            "gate::protocol::A",
            "gate::protocol::B",
            "gate::server"
        ]
    );
    assert_eq!(
        found(&feed, "use crate::{self as c, metrics};"),
        ["", "metrics"]
    );
    assert_eq!(
        found(&feed, "let x = crate :: fills :: model :: f();"),
        ["fills::model::f"]
    );
    assert_eq!(
        found(&feed, "use super::table::Words;"),
        ["feed::table::Words"]
    );
    assert_eq!(found(&feed, "use super::super::config::C;"), ["config::C"]);
    assert_eq!(
        found(&["feed"], "use super::net::receiver;"),
        ["net::receiver"]
    );
    // Not code: comments, strings, test items; nor a longer identifier.
    let quiet = r##"
        // use crate::gate::X;
        /* crate::gate::Y */
        const S: &str = "crate::gate::Z { ";
        const R: &str = r#"crate::gate::W"#;
        const C: char = '{';
        fn f<'a>(x: &'a str) -> &'a str { x }
        #[cfg(test)]
        mod tests {
            use crate::gate::protocol::answer;
            fn g() { let s = "}"; }
        }
        #[cfg(test)]
        use crate::metrics::M;
        use my_crate::gate::V;
        use crate::wire::Symbol;
    "##;
    assert_eq!(found(&feed, quiet), ["wire::Symbol"]);
}

//! `tickgate generate man DIR` and `tickgate generate completions DIR`
//! (hidden; the Debian package's man pages and completions): a page for
//! every command `--help` lists, at any depth, with that command's
//! options; completions for bash, zsh and fish that offer the commands;
//! and nothing of `generate` itself in either.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn bin() -> String {
    std::env::var("TICKGATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tickgate").to_string())
}

fn run(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "tickgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a `--help` text lists under "Commands:" (not `help`).
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every command path `--help` reaches, as man page names
/// (`tickgate-fills-apply`), the top one included.
fn pages_from_help(path: &mut Vec<String>, out: &mut BTreeSet<String>) {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    out.insert(
        std::iter::once("tickgate".to_string())
            .chain(path.iter().cloned())
            .collect::<Vec<_>>()
            .join("-"),
    );
    for sub in listed_commands(&run(&args)) {
        path.push(sub);
        pages_from_help(path, out);
        path.pop();
    }
}

fn names_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[test]
fn a_man_page_for_every_command_help_lists() {
    let mut want = BTreeSet::new();
    pages_from_help(&mut Vec::new(), &mut want);
    assert!(
        want.contains("tickgate-run") && want.contains("tickgate-fills-consume-kafka"),
        "{want:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man");
    let printed = run(&["generate", "man", man.to_str().unwrap()]);
    let files = names_in(&man);
    let want_files: BTreeSet<String> = want.iter().map(|p| format!("{p}.1")).collect();
    assert_eq!(files, want_files);
    // Each file written is printed, one per line.
    let printed: BTreeSet<String> = printed
        .lines()
        .map(|l| {
            Path::new(l)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(printed, want_files);

    // A page carries its command's options and text (roff escapes '-').
    let run_page = std::fs::read_to_string(man.join("tickgate-run.1")).unwrap();
    assert!(
        run_page.starts_with(".ie \\n(.g .ds Aq"),
        "roff: {run_page:.200}"
    );
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        run_page.contains(&format!(
            ".TH tickgate-run 1  \"tickgate {version}\" tickgate"
        )),
        "{run_page}"
    );
    assert!(run_page.contains("\\-\\-check\\-config"), "{run_page}");
    assert!(
        run_page.contains("Only check the config file"),
        "{run_page}"
    );
    let top = std::fs::read_to_string(man.join("tickgate.1")).unwrap();
    assert!(
        top.contains("Exit status: 0 success"),
        "the after_help text: {top}"
    );
    for page in &files {
        let text = std::fs::read_to_string(man.join(page)).unwrap();
        assert!(
            !text.contains("generate"),
            "{page} mentions the hidden command"
        );
    }
}

#[test]
fn completions_for_bash_zsh_and_fish_offer_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("completions");
    run(&["generate", "completions", out.to_str().unwrap()]);
    assert_eq!(
        names_in(&out),
        ["_tickgate", "tickgate.bash", "tickgate.fish"]
            .map(String::from)
            .into()
    );
    for name in ["_tickgate", "tickgate.bash", "tickgate.fish"] {
        let text = std::fs::read_to_string(out.join(name)).unwrap();
        for word in ["run", "consume-kafka", "check-config", "stale-ms"] {
            assert!(text.contains(word), "{name} lacks {word}");
        }
        assert!(
            !text.contains("generate"),
            "{name} offers the hidden command"
        );
    }
    // The bash file parses, and registers itself for `tickgate`.
    let bash = out.join("tickgate.bash");
    let st = Command::new("bash")
        .arg("-c")
        .arg("source \"$1\" && complete -p tickgate")
        .arg("bash")
        .arg(&bash)
        .output();
    match st {
        Ok(o) => assert!(
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains("tickgate"),
            "bash: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("bash: {e}"),
    }
}

#[test]
fn generate_is_hidden_from_help_and_refuses_a_missing_dir_argument() {
    assert!(!run(&["--help"]).contains("generate"));
    let out = Command::new(bin())
        .args(["generate", "man"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<DIR>"));
    // A DIR that cannot be made: the error names it, exit 2.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let target = file.join("man");
    let out = Command::new(bin())
        .args(["generate", "man"])
        .arg(&target)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("creating {}", target.display())),
        "{stderr}"
    );
}

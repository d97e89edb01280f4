//! `spec/` is a copy of the contract, which is kept in `../shared/spec/`
//! beside the repository where the project is developed: when that folder
//! is there, the copy must equal it file by file (a file on one side only
//! is a difference too). A clone with nothing beside it skips the
//! comparison, and says so on the real standard error.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Every file under `dir`, by its path relative to `dir` ('/'-separated).
fn files(dir: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap();
                let name = rel.to_string_lossy().replace('\\', "/");
                out.insert(name, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The differences between the copy and the original, one line each,
/// naming the file.
fn differences(copy: &Path, original: &Path) -> Vec<String> {
    let copy_files = files(copy);
    let original_files = files(original);
    let mut out = Vec::new();
    for (name, path) in &original_files {
        match copy_files.get(name) {
            None => out.push(format!(
                "{name}: in {} but not in {}",
                original.display(),
                copy.display()
            )),
            Some(copied) => {
                if std::fs::read(path).unwrap() != std::fs::read(copied).unwrap() {
                    out.push(format!(
                        "{name}: {} differs from {}",
                        copied.display(),
                        path.display()
                    ));
                }
            }
        }
    }
    for name in copy_files.keys() {
        if !original_files.contains_key(name) {
            out.push(format!(
                "{name}: in {} but not in {}",
                copy.display(),
                original.display()
            ));
        }
    }
    out
}

#[test]
fn spec_copy_equals_the_shared_contract() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = root.join("spec");
    assert!(copy.is_dir(), "{} is missing", copy.display());
    let original = root.join("../shared/spec");
    if !original.is_dir() {
        // Past libtest's capture, so that the skip shows in the output.
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED spec_copy: ../shared/spec is absent"
        );
        return;
    }
    let diffs = differences(&copy, &original);
    assert!(
        diffs.is_empty(),
        "spec/ is not a copy of ../shared/spec/ (copy the contract again):\n{}",
        diffs.join("\n")
    );
}

/// The comparison itself: equal folders pass; a changed file and a file on
/// either side only are each named.
#[test]
fn differences_name_each_file() {
    let copy = tempfile::tempdir().unwrap();
    let original = tempfile::tempdir().unwrap();
    for dir in [copy.path(), original.path()] {
        std::fs::write(dir.join("wire.md"), "# Wire\n").unwrap();
        std::fs::write(dir.join("vectors.json"), "{}").unwrap();
    }
    assert_eq!(
        differences(copy.path(), original.path()),
        Vec::<String>::new()
    );

    std::fs::write(copy.path().join("vectors.json"), "{ }").unwrap();
    std::fs::write(original.path().join("recovery.md"), "# Recovery\n").unwrap();
    std::fs::write(copy.path().join("old.md"), "# Old\n").unwrap();
    let diffs = differences(copy.path(), original.path());
    assert_eq!(diffs.len(), 3, "{diffs:?}");
    assert!(diffs[0].starts_with("recovery.md: in "), "{diffs:?}");
    assert!(diffs[0].ends_with(&format!("but not in {}", copy.path().display())));
    assert!(diffs[1].starts_with("vectors.json: ") && diffs[1].contains(" differs from "));
    assert!(diffs[2].starts_with("old.md: in "), "{diffs:?}");
    assert!(diffs[2].ends_with(&format!("but not in {}", original.path().display())));
}

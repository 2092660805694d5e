//! No hand-written Rust source file over [`MAX_LINES`] lines (issue 42).
//!
//! A file that long has usually grown several responsibilities, and the next
//! reader has to hold all of them at once; split it into modules along them.
//! The test lives here because `paceline-model` is the workspace's smallest
//! crate: it builds in seconds and runs before anything heavy.
//!
//! It reads the repository's Rust files as git sees them (tracked, plus new
//! files not ignored, so a new file cannot slip past before its first
//! commit), skipping `target/` and any file marked `@generated` in its first
//! lines. Outside a git checkout it walks the tree instead.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cap, in lines (as `wc -l` counts them).
const MAX_LINES: usize = 800;

/// Files still over the cap when the check landed, with their line count
/// then: each may shrink but not grow, and leaves this list once it is
/// under the cap (the test prints a note when one is).
const ALLOWED_OVER: &[(&str, usize)] = &[];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The repository's `.rs` files, relative to `root`.
fn rust_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.rs"])
        .current_dir(root)
        .output();
    match listed {
        Ok(out) if out.status.success() => out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect(),
        // Not a git checkout (a source archive) or no git: walk the tree.
        _ => {
            let mut files = Vec::new();
            walk(root, Path::new(""), &mut files);
            files
        }
    }
}

fn walk(root: &Path, rel: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        let path = rel.join(&*name);
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(root, &path, files),
            Ok(t) if t.is_file() && name.ends_with(".rs") => files.push(path),
            _ => {}
        }
    }
}

/// Generated code is exempt: it is not read or edited by hand.
fn generated(text: &str) -> bool {
    text.lines().take(5).any(|l| l.contains("@generated"))
}

#[test]
fn no_hand_written_rust_file_is_over_the_cap() {
    let root = repo_root();
    let files = rust_files(&root);
    assert!(!files.is_empty(), "no .rs files found under {}", root.display());
    let mut over = Vec::new();
    for rel in files {
        if rel.components().any(|c| c.as_os_str() == "target") {
            continue;
        }
        // Listed by git but deleted in the work tree: nothing to measure.
        let Ok(text) = std::fs::read_to_string(root.join(&rel)) else { continue };
        if generated(&text) {
            continue;
        }
        let lines = text.lines().count();
        let name = rel.to_string_lossy().replace('\\', "/");
        let allowed = ALLOWED_OVER.iter().find(|(f, _)| *f == name).map_or(MAX_LINES, |(_, n)| (*n).max(MAX_LINES));
        if lines > allowed {
            over.push(format!("{name}: {lines} lines (at most {allowed})"));
        }
    }
    for (name, was) in ALLOWED_OVER {
        let now = std::fs::read_to_string(root.join(name)).map(|t| t.lines().count()).unwrap_or(0);
        if now <= MAX_LINES {
            eprintln!("note: {name} is under the cap now ({now} lines, was {was}): take it off ALLOWED_OVER");
        }
    }
    assert!(
        over.is_empty(),
        "{} file(s) over the {MAX_LINES}-line cap; split each into modules along its responsibilities:\n{}",
        over.len(),
        over.join("\n")
    );
}

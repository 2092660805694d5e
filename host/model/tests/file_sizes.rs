//! No hand-written source file over [`MAX_LINES`] lines (issue 42): Rust,
//! and the Python, shell, TypeScript and JavaScript of the SDKs, deploy
//! scripts and `scripts/` (whose executables have no extension).
//!
//! A file that long has usually grown several responsibilities, and the next
//! reader has to hold all of them at once; split it into modules along them.
//! The test lives here because `paceline-model` is the workspace's smallest
//! crate: it builds in seconds and runs before anything heavy.
//!
//! It reads the repository's source files as git sees them (tracked, plus new
//! files not ignored, so a new file cannot slip past before its first
//! commit), skipping `target/`, vendored code (`vendor/`, `node_modules/`)
//! and any file marked `@generated` in its first lines. Outside a git checkout it walks the tree instead.

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

/// Endings of the hand-written languages the cap covers.
const ENDINGS: &[&str] = &[".rs", ".py", ".sh", ".ts", ".js"];

/// Whether `rel` is a source file the cap covers: one of [`ENDINGS`], or
/// any file directly in `scripts/` (the project's commands, no extension).
fn covered(rel: &Path) -> bool {
    let name = rel.to_string_lossy();
    ENDINGS.iter().any(|e| name.ends_with(e)) || rel.parent() == Some(Path::new("scripts"))
}

/// Code someone else wrote, kept here as it came.
fn vendored(rel: &Path) -> bool {
    rel.components().any(|c| matches!(c.as_os_str().to_str(), Some("target" | "vendor" | "node_modules")))
}

/// The repository's source files, relative to `root`.
fn source_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"])
        .current_dir(root)
        .output();
    match listed {
        Ok(out) if out.status.success() => out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .filter(|p| covered(p))
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
            Ok(t) if t.is_file() && covered(&path) => files.push(path),
            _ => {}
        }
    }
}

/// Generated code is exempt: it is not read or edited by hand.
fn generated(text: &str) -> bool {
    text.lines().take(5).any(|l| l.contains("@generated"))
}

#[test]
fn no_hand_written_source_file_is_over_the_cap() {
    let root = repo_root();
    let files = source_files(&root);
    assert!(
        files.iter().any(|f| f.extension().is_some_and(|e| e == "rs")),
        "no .rs files found under {}",
        root.display()
    );
    assert!(files.iter().any(|f| f.parent() == Some(Path::new("scripts"))), "no scripts/ files found");
    let mut over = Vec::new();
    for rel in files {
        if vendored(&rel) {
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

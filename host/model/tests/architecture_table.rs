//! `docs/architecture.md` names every crate (issue 42): each workspace member
//! under `host/` and `sdk/` has a row in its crate table, the plugins have
//! theirs (`plugins/*`), and no row names a crate that is gone. Each of
//! those crates opens with a crate-level doc comment saying what it owns.
//! The test lives in `paceline-model`, the smallest crate, so it runs early.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The workspace's members, as the root `Cargo.toml` lists them.
fn members(root: &Path) -> Vec<String> {
    let manifest = read(&root.join("Cargo.toml"));
    let start = manifest.find("members = [").expect("a members list");
    let list = &manifest[start..];
    let end = list.find(']').expect("the members list ends");
    list[..end].split('"').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The crate paths the table's rows name (its first column).
fn table_rows(doc: &str) -> Vec<String> {
    let start = doc.find("## Each crate's job").expect("a crate table section");
    doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .filter_map(|cell| cell.trim().strip_prefix('`')?.strip_suffix('`').map(str::to_owned))
        .collect()
}

#[test]
fn every_host_and_sdk_crate_has_a_row_and_every_row_a_crate() {
    let root = repo_root();
    let members = members(&root);
    assert!(members.iter().any(|m| m == "host/model"), "members read: {members:?}");
    let rows = table_rows(&read(&root.join("docs/architecture.md")));
    let mut missing = Vec::new();
    for m in &members {
        let covered = if m.starts_with("plugins/") { rows.iter().any(|r| r == "plugins/*") } else { rows.contains(m) };
        if !covered {
            missing.push(m.as_str());
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md's crate table has no row for {missing:?}");
    let gone: Vec<_> = rows.iter().filter(|r| *r != "plugins/*" && !members.contains(r)).collect();
    assert!(gone.is_empty(), "docs/architecture.md's crate table names crates that are not members: {gone:?}");
}

#[test]
fn every_host_and_sdk_crate_opens_with_a_doc_comment() {
    let root = repo_root();
    let mut bare = Vec::new();
    for m in members(&root).iter().filter(|m| m.starts_with("host/") || m.starts_with("sdk/")) {
        let src = root.join(m).join("src");
        let top = if src.join("lib.rs").exists() { src.join("lib.rs") } else { src.join("main.rs") };
        if !read(&top).trim_start().starts_with("//!") {
            bare.push(top.strip_prefix(&root).unwrap_or(&top).display().to_string());
        }
    }
    assert!(bare.is_empty(), "no crate-level doc comment (what it owns, what it must not touch) in {bare:?}");
}

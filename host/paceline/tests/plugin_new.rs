//! `paceline plugin new` and `paceline plugin build`, as a plugin author uses
//! them: every language and kind gets a project whose own test passes
//! natively (Python's pytest and TypeScript's node:test here; Rust's
//! `cargo test` is left out for time), and one project per language is built
//! into a component with `plugin build` and run on its scenario with
//! `plugin run` (a Rust placement policy, and a Python and a TypeScript
//! lifecycle: the one world the ports in plugins/examples do not cover).
//! Bad input is refused with a clear message and writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn paceline(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_paceline"))
        .current_dir(dir)
        .args(args)
        .env("PACELINE_ROOT", root())
        .output()
        .expect("run paceline")
}

fn ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn toolchains() {
    let out = Command::new(root().join("scripts/toolchains")).output().expect("run scripts/toolchains");
    ok("scripts/toolchains", &out);
}

#[test]
fn new_projects_pass_their_own_tests_and_build_into_components_that_meet_their_scenario() {
    toolchains();
    let dir = tempfile::tempdir().expect("tempdir");
    let python = root().join("target/toolchains/python/bin/python");
    let node_tests = root().join("sdk/js/tools/test.mjs");
    for lang in ["rust", "python", "js"] {
        for kind in ["placement", "preemption", "lifecycle"] {
            let name = format!("{lang}-{kind}");
            ok(
                &format!("plugin new {name}"),
                &paceline(dir.path(), &["plugin", "new", &name, "--lang", lang, "--kind", kind]),
            );
            let project = dir.path().join(&name);
            assert!(project.join("plugin.toml").exists() && project.join("scenarios/01-example.yaml").exists());
            let test = match lang {
                "python" => Some(
                    Command::new(&python)
                        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
                        .current_dir(&project)
                        .output(),
                ),
                "js" => Some(Command::new("node").arg(&node_tests).arg("test").current_dir(&project).output()),
                _ => None,
            };
            if let Some(out) = test {
                ok(&format!("{name}: its own tests"), &out.expect("run the project's tests"));
            }
        }
    }
    for name in ["rust-placement", "python-lifecycle", "js-lifecycle"] {
        let project = dir.path().join(name);
        ok(&format!("plugin build {name}"), &paceline(&project, &["plugin", "build", "."]));
        let wasm = project.join("target").join(format!("{name}.wasm"));
        assert!(wasm.exists(), "{} was built", wasm.display());
        let out = paceline(
            &project,
            &["plugin", "run", wasm.to_str().expect("utf-8 path"), "--scenario", "scenarios/01-example.yaml"],
        );
        ok(&format!("plugin run {name}"), &out);
    }
}

#[test]
fn bad_names_existing_directories_and_broken_projects_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = paceline(dir.path(), &["plugin", "new", "../evil", "--lang", "python", "--kind", "placement"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid plugin name"), "{out:?}");
    std::fs::create_dir(dir.path().join("taken")).expect("mkdir");
    std::fs::write(dir.path().join("taken/keep.txt"), "mine").expect("write");
    let out = paceline(dir.path(), &["plugin", "new", "taken", "--lang", "js", "--kind", "lifecycle"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"), "{out:?}");
    assert_eq!(std::fs::read_dir(dir.path().join("taken")).expect("dir").count(), 1, "nothing was written");
    // A directory without plugin.toml, and one whose manifest names an unknown language.
    let out = paceline(dir.path(), &["plugin", "build", "taken"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no plugin.toml"), "{out:?}");
    std::fs::write(dir.path().join("taken/plugin.toml"), "name = \"x\"\nlang = \"cobol\"\nworld = \"placement\"\n")
        .expect("write");
    let out = paceline(dir.path(), &["plugin", "build", "taken"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lang must be rust, python or js"), "{out:?}");
}

//! The `paceline` binary as a user runs it: plugin tools and the demo.

use std::process::{Command, Output};

use paceline_plugin_artifacts as artifacts;

fn paceline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_paceline")).args(args).output().expect("paceline runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scenario(plugin: &str, file: &str) -> String {
    format!("{}/../../plugins/{plugin}/scenarios/{file}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn validate_accepts_a_default_plugin_and_names_its_world() {
    let out = paceline(&["plugin", "validate", artifacts::SPREAD_PATH]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("world:     placement"), "{stdout}");
    let out = paceline(&["plugin", "validate", artifacts::PRIORITY_PREEMPT_PATH]);
    assert!(text(&out.stdout).contains("world:     preemption"));
}

#[test]
fn validate_refuses_bad_files_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, "hello, I am not a plugin").expect("write");
    let cases: [(Vec<&str>, &str); 4] = [
        (vec!["plugin", "validate", junk.to_str().expect("utf-8")], "not a WebAssembly file"),
        (vec!["plugin", "validate", "/nonexistent/x.wasm"], "cannot read /nonexistent/x.wasm"),
        (
            vec!["plugin", "validate", artifacts::PRIORITY_PREEMPT_PATH, "--slot", "placement/batch"],
            "does not fit slot placement/batch",
        ),
        (vec!["plugin", "validate", artifacts::GUEST_PANIC_PATH], "self-test failed"),
    ];
    for (args, message) in cases {
        let out = paceline(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: expected {message:?} in {stderr}");
    }
}

#[test]
fn run_prints_the_same_decision_in_every_process() {
    let file = scenario("binpack", "02-gang-all-or-nothing.yaml");
    let first = paceline(&["plugin", "run", artifacts::BINPACK_PATH, "--scenario", &file]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = paceline(&["plugin", "run", artifacts::BINPACK_PATH, "--scenario", &file]);
    assert_eq!(first.stdout, second.stdout, "byte-identical across process restarts");
    let decision: serde_json::Value = serde_json::from_slice(&first.stdout).expect("JSON");
    assert_eq!(decision["placement"]["assignments"][0]["task"], 3);
}

#[test]
fn run_exits_non_zero_when_the_decision_differs_from_the_scenario() {
    // spread on binpack's best-fit scenario gives another answer.
    let out =
        paceline(&["plugin", "run", artifacts::SPREAD_PATH, "--scenario", &scenario("binpack", "01-best-fit.yaml")]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("scenario check failed"));
}

#[test]
fn demo_places_the_sample_workload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = paceline(&["demo", "--data-dir", dir.path().to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("served by plugin binpack@"), "{stdout}");
    assert!(stdout.contains("train-3 -> host-1"), "the GPU gang lands on the GPU hosts: {stdout}");
    assert!(!stdout.contains("not placed"), "{stdout}");
    // Second run over the same directory: versions were persisted and stay active.
    let again = paceline(&["demo", "--data-dir", dir.path().to_str().expect("utf-8")]);
    assert!(text(&again.stdout).contains("already active"));
}

#[test]
fn bench_pipeline_launches_every_task_and_says_where_the_time_went() {
    // A small run: 3 jobs of 4 instances on 6 simulated hosts.
    let out = paceline(&["bench", "pipeline", "--jobs", "3", "--instances", "4", "--hosts", "6"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("pipeline: 12 tasks (3 jobs x 4) onto 6 simulated hosts"), "{stdout}");
    assert!(stdout.contains("submit -> running per task (12 measured)"), "every task reached RUNNING: {stdout}");
    assert!(stdout.contains("until all launched: creating jobs"), "{stdout}");
    // Lifecycle calls: one per job at least (its creation), and fewer than
    // one per task: a job's burst of RUNNING updates is one `on-events` call.
    let calls = |slot: &str| -> u64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("plugin {slot} ")))
            .unwrap_or_else(|| panic!("no {slot} line: {stdout}"));
        let after = line.split("): ").nth(1).expect("calls");
        after.split(' ').next().expect("number").parse().expect("a count")
    };
    assert!((3..12).contains(&calls("lifecycle/batch")), "{stdout}");
    assert!(calls("placement/batch") >= 1, "{stdout}");
}

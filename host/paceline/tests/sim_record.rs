//! A recorded `paceline dev` session replays faithfully: a real `paceline
//! dev` with two agents runs real processes (batch jobs that succeed, one
//! that fails after its retry, one that fails once then succeeds, one killed
//! while it runs); `paceline trace record` exports it through the API;
//! `paceline sim run` replays the trace; the replay places as many runs as
//! the live cluster did and every job's tasks end the same way.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{BIN, Dev, cli, eventually, free_port, json, ok};

/// A batch job of `n` instances running `sh -c script`, with up to
/// `restarts` retries after a failure.
fn job_file(dir: &Path, name: &str, n: u32, script: &str, restarts: u32) -> String {
    let path = dir.join(format!("{name}.yaml"));
    let yaml = format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: sh\n  args: [\"-c\", {script:?}]\n  resources: {{cpu_millis: 100, memory_mib: 32, disk_mib: 10, gpu_milli: 0, ports: 0}}\n  restart_policy: {{on_failure: {}, max_restarts: {restarts}, backoff_secs: 1}}\n",
        restarts > 0
    );
    std::fs::write(&path, yaml).expect("write the job file");
    path.to_str().expect("utf-8").to_string()
}

fn job_state(api: u16, id: &str) -> String {
    json(api, &["job", "get", id])["status"]["state"].as_str().unwrap_or_default().to_string()
}

fn task_states(api: u16, id: &str) -> Vec<String> {
    let tasks = json(api, &["task", "list", id]);
    let mut states: Vec<(u64, String)> = tasks
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| (t["instance"].as_u64().unwrap_or(0), t["state"].as_str().unwrap_or_default().to_string()))
        .collect();
    states.sort();
    states.into_iter().map(|(_, s)| s).collect()
}

/// Runs placed over the job's tasks: PLACED events in each task's history.
fn live_placements(api: u16, id: &str, n: u32) -> u64 {
    (0..n)
        .map(|i| {
            let events = json(api, &["task", "events", id, &i.to_string()]);
            events.as_array().into_iter().flatten().filter(|e| e["to"] == "PLACED").count() as u64
        })
        .sum()
}

#[test]
fn a_recorded_dev_session_replays_to_the_same_placements_and_outcomes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let data = dir.path().join("dev");
    let _dev = Dev::spawn(
        &[
            "dev",
            "--agents",
            "2",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "API on",
    );
    eventually(60, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));

    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).expect("mkdir");
    // (job file, instances, live state it must reach)
    let jobs = [
        (job_file(dir.path(), "ok", 3, "sleep 1", 0), 3, "SUCCEEDED"),
        (job_file(dir.path(), "fails", 1, "exit 3", 1), 1, "FAILED"),
        (
            job_file(
                dir.path(),
                "flaky",
                2,
                &format!(
                    "m={}/$PACELINE_TASK_ID; if [ -e $m ]; then sleep 1; exit 0; fi; touch $m; exit 1",
                    marks.display()
                ),
                2,
            ),
            2,
            "SUCCEEDED",
        ),
        (job_file(dir.path(), "killed", 2, "sleep 600", 0), 2, "KILLED"),
    ];
    let mut ids = Vec::new();
    for (file, n, _) in &jobs {
        ids.push((ok(cli(api, &["job", "create", file])), *n));
    }
    let killed = ids[3].0.clone();
    eventually(90, "the sleeping job's tasks run", || task_states(api, &killed).iter().all(|s| s == "RUNNING"));
    ok(cli(api, &["job", "kill", &killed]));
    for ((id, _), (_, _, want)) in ids.iter().zip(&jobs) {
        eventually(120, &format!("job {id} {want}"), || job_state(api, id).ends_with(want));
    }
    // The live cluster's answer: each job's task outcomes, and runs placed.
    let mut live: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut live_runs = 0;
    for (id, n) in &ids {
        let states = task_states(api, id);
        assert_eq!(states.len(), *n as usize, "{id}: {states:?}");
        live.insert(id.clone(), states);
        live_runs += live_placements(api, id, *n);
    }
    assert_eq!(live[&ids[1].0], vec!["FAILED"], "the failing task failed after its retry");
    assert_eq!(live_runs, 3 + 2 + 4 + 2, "ok 3, fails 2 (a retry), flaky 4 (one retry each), killed 2");

    // Record it through the API with the real binary, then replay it.
    let trace = dir.path().join("dev.jsonl");
    ok(cli(api, &["trace", "record", "-o", trace.to_str().expect("utf-8"), "--name", "dev-session"]));
    let text = std::fs::read_to_string(&trace).expect("trace written");
    assert!(text.starts_with(r#"{"format":"paceline-trace","version":1"#), "{text}");
    let out = Command::new(BIN)
        .args(["sim", "run", trace.to_str().expect("utf-8"), "-o", "json", "--reproducible", "--tasks"])
        .output()
        .expect("sim runs");
    let report: serde_json::Value = serde_json::from_str(&ok(out)).expect("a JSON report");

    let mut replayed: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for t in report["tasks"].as_array().expect("tasks listed") {
        let job = t["job"].as_str().unwrap_or_default().to_string();
        let outcome = t["outcome"].as_str().unwrap_or_default().to_ascii_uppercase();
        replayed.entry(job).or_default().push((t["instance"].as_u64().unwrap_or(0), outcome));
    }
    let replayed: BTreeMap<String, Vec<String>> = replayed
        .into_iter()
        .map(|(job, mut v)| {
            v.sort();
            (job, v.into_iter().map(|(_, o)| o).collect())
        })
        .collect();
    assert_eq!(replayed, live, "every job's tasks end the same way\n{text}");
    assert_eq!(report["summary"]["placements"], live_runs, "as many runs placed\n{text}");
    let o = &report["outcomes"];
    assert_eq!((o["tasks"].as_u64(), o["never_placed"].as_u64(), o["lost"].as_u64()), (Some(8), Some(0), Some(0)));
    assert_eq!(report["hosts"], 2, "the two agents' hosts");
}

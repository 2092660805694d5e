//! The launch log (`launches.log`): one line per process start, kept across
//! restarts and garbage collection, so a second start of a run id shows.

use std::time::Duration;

use paceline_agent::LaunchOutcome;
use paceline_agent::launch_log::{self, LaunchLine};
use paceline_proto::agent::v1::RunState;

use crate::common::*;

fn launches(h: &Harness) -> Vec<LaunchLine> {
    let text = std::fs::read_to_string(launch_log::launch_log_path(h.dir.path())).unwrap_or_default();
    launch_log::parse(&text)
}

fn run_ids(lines: &[LaunchLine]) -> Vec<&str> {
    lines.iter().map(|l| l.run_id.as_str()).collect()
}

#[tokio::test]
async fn every_start_is_logged_once_and_a_restart_or_duplicate_adds_nothing() {
    let mut h = harness().await;
    let mut first = spec("log-1", "sleep", &["60"]);
    first.task_id = "job-a-0".into();
    h.sup.launch_spec(first.clone()).unwrap();
    h.sup.launch_spec(sh("log-2", "true")).unwrap();
    wait_for(&mut h.events, "log-1", Duration::from_secs(10), |u| state(u) == RunState::Running).await;
    wait_terminal(&mut h.events, "log-2", Duration::from_secs(10)).await;

    // A duplicate launch of a live run and an agent restart (re-adoption)
    // start nothing, so they log nothing.
    assert_eq!(h.sup.launch_spec(first).unwrap(), LaunchOutcome::AlreadyRunning);
    h.reopen().await;
    let lines = launches(&h);
    let mut ids = run_ids(&lines);
    ids.sort_unstable();
    assert_eq!(ids, vec!["log-1", "log-2"]);
    let line = lines.iter().find(|l| l.run_id == "log-1").unwrap();
    assert_eq!(line.task_id, "job-a-0");
    assert!(line.at_ms > 0);
    h.sup.kill("log-1", Some(1)).unwrap();
    wait_terminal(&mut h.events, "log-1", Duration::from_secs(10)).await;
}

#[tokio::test]
async fn the_log_outlives_garbage_collection_and_shows_a_second_start() {
    let mut h = harness().await;
    h.sup.launch_spec(sh("again-1", "true")).unwrap();
    let u = wait_terminal(&mut h.events, "again-1", Duration::from_secs(10)).await;
    h.sup.ack("again-1", u.last().unwrap().seq).unwrap();
    assert_eq!(h.sup.gc(Duration::ZERO), 1);
    // The record is gone, so the agent accepts the run id again; the log
    // still holds the first start, which is what the torture check counts.
    h.sup.launch_spec(sh("again-1", "true")).unwrap();
    wait_terminal(&mut h.events, "again-1", Duration::from_secs(10)).await;
    assert_eq!(run_ids(&launches(&h)), vec!["again-1", "again-1"]);
}

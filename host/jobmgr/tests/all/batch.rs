use paceline_jobmgr::scenario::Harness;
use paceline_model::job::{JobKind, JobState};
use paceline_model::run::RunState;
use paceline_model::task::{RestartPolicy, TaskState};

use crate::common::*;

fn retrying(max: u32) -> paceline_model::job::JobConfig {
    let mut c = config(JobKind::Batch, 2);
    c.default_task.restart_policy =
        RestartPolicy { on_failure: true, max_restarts: Some(max), ..RestartPolicy::default() };
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_instances_are_retried_and_the_job_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    h.jm.create("b1", retrying(3)).await.expect("create");
    h.pump(&no_health, 10).await;
    assert_eq!(h.jm.get("b1").await.expect("get").runtime.state, JobState::Running);
    for i in 0..2 {
        h.report(&format!("b1-{i}-1"), RunState::Failed, None).await;
    }
    // Nothing restarts before the backoff.
    assert_eq!(h.place().await, 0);
    h.advance(1_000).await;
    h.pump(&no_health, 10).await;
    assert_eq!(h.launch_counts("b1").values().copied().collect::<Vec<_>>(), vec![2, 2]);
    for i in 0..2 {
        h.report(&format!("b1-{i}-2"), RunState::Succeeded, None).await;
    }
    let job = h.jm.get("b1").await.expect("get");
    assert_eq!(job.runtime.state, JobState::Succeeded);
    assert!(job.tasks.iter().all(|t| t.state == TaskState::Succeeded && t.run == 2));
    // Events: the first run's whole life, then the second's.
    let events = h.jm.task_events("b1", 0).await.expect("events");
    // (The manual clock stands still, so events of one instant come in no set order.)
    let of_run = |run: u64| -> Vec<TaskState> { events.iter().filter(|e| e.run == run).map(|e| e.to).collect() };
    // The first run is stored PENDING with the job (no event); a restart is submitted (PENDING event).
    for s in [TaskState::Placed, TaskState::Launching, TaskState::Launched, TaskState::Running, TaskState::Failed] {
        assert!(of_run(1).contains(&s), "run 1 lacks {s}: {:?}", of_run(1));
    }
    for s in [TaskState::Pending, TaskState::Placed, TaskState::Running, TaskState::Succeeded] {
        assert!(of_run(2).contains(&s), "run 2 lacks {s}: {:?}", of_run(2));
    }
    assert!(events.iter().any(|e| e.host.as_deref().is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_spends_its_budget_fails_the_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("b2", retrying(1)).await.expect("create");
    h.pump(&no_health, 10).await;
    h.report("b2-0-1", RunState::Failed, None).await;
    h.advance(1_000).await;
    h.pump(&no_health, 10).await;
    h.report("b2-0-2", RunState::Failed, None).await;
    let job = h.jm.get("b2").await.expect("get");
    assert_eq!(job.runtime.state, JobState::Failed);
    // What still ran is killed.
    assert!(h.launcher.kills().iter().any(|(_, run)| run == "b2-1-1"), "{:?}", h.launcher.kills());
    h.pump(&no_health, 5).await;
    h.advance(60_000).await;
    assert_eq!(h.place().await, 0, "a failed job restarts nothing");
    assert_eq!(h.jm.get("b2").await.expect("get").runtime.state, JobState::Failed);
    h.jm.delete("b2").await.expect("delete terminal job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_run_time_kills_an_overrun_as_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    let mut c = config(JobKind::Batch, 1);
    c.sla.max_run_time_secs = Some(10);
    h.jm.create("b3", c).await.expect("create");
    h.pump(&no_health, 10).await;
    h.advance(10_000).await;
    assert_eq!(h.launcher.kills(), vec![("h1".to_string(), "b3-0-1".to_string())]);
    h.pump(&no_health, 10).await;
    let job = h.jm.get("b3").await.expect("get");
    assert_eq!(job.tasks[0].state, TaskState::Failed);
    assert_eq!(job.tasks[0].reason, "MAX_RUN_TIME");
    assert_eq!(job.runtime.state, JobState::Failed, "no retries allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_stops_everything_and_delete_needs_a_terminal_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("b4", config(JobKind::Batch, 3)).await.expect("create");
    h.pump(&no_health, 10).await;
    assert!(h.jm.delete("b4").await.is_err());
    h.jm.kill("b4", None).await.expect("kill");
    assert_eq!(h.jm.get("b4").await.expect("get").runtime.state, JobState::Killing);
    h.pump(&no_health, 10).await;
    let job = h.jm.get("b4").await.expect("get");
    assert_eq!(job.runtime.state, JobState::Killed);
    assert!(job.tasks.iter().all(|t| t.state == TaskState::Killed));
    assert!(h.jm.expected_runs().is_empty());
    h.jm.delete("b4").await.expect("delete");
    assert!(h.jm.get("b4").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_launch_goes_back_to_the_resource_manager_with_a_new_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.launcher.refuse.lock().expect("lock").insert("h1".into());
    h.jm.create("b5", config(JobKind::Batch, 1)).await.expect("create");
    assert_eq!(h.place().await, 1);
    let t = h.jm.task("b5", 0).expect("task");
    assert_eq!((t.state, t.run, t.reason.as_str()), (TaskState::Pending, 2, "SUBMITTED"));
    h.launcher.refuse.lock().expect("lock").clear();
    h.pump(&no_health, 10).await;
    let l = h.launcher.launches();
    assert_eq!(l.iter().map(|l| l.run.run_id.as_str()).collect::<Vec<_>>(), vec!["b5-0-2"]);
    assert_eq!(h.jm.task("b5", 0).expect("task").state, TaskState::Running);
    // A duplicate or stale update changes nothing.
    h.report("b5-0-1", RunState::Failed, None).await;
    assert_eq!(h.jm.task("b5", 0).expect("task").state, TaskState::Running);
    // Expected with the last seq handled, so that a LOST a new host manager
    // makes up for it follows that seq rather than passing for a duplicate.
    let handled = h.jm.task("b5", 0).expect("task");
    assert_eq!(
        h.jm.expected_runs(),
        vec![paceline_joints::ExpectedRun {
            host: "h1".to_string(),
            run_id: "b5-0-2".to_string(),
            task_id: "b5-0".to_string(),
            resources: paceline_model::Resources::new(100, 64, 10, 0),
            gpu: Default::default(),
            // The harness reported RUNNING as the run's first update.
            last_seq: 1
        }]
    );
    assert_eq!(handled.run, 2);
}

/// A host that refuses one run of a batch (its task still has a live run
/// there, say) refuses that run alone: its batch-mates launch, and only the
/// refused task gets a new run, retried at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_refused_alone_leaves_its_batch_mates_launched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.launcher.refuse_tasks.lock().expect("lock").insert("b7-1".into());
    h.jm.create("b7", config(JobKind::Batch, 3)).await.expect("create");
    assert_eq!(h.place().await, 3);
    let launched: Vec<String> = h.launcher.launches().into_iter().map(|l| l.run.run_id).collect();
    assert_eq!(launched, ["b7-0-1", "b7-2-1"]);
    for i in [0, 2] {
        let t = h.jm.task("b7", i).expect("task");
        assert_eq!((t.state, t.run), (TaskState::Launched, 1), "instance {i}");
    }
    let t = h.jm.task("b7", 1).expect("task");
    assert_eq!((t.state, t.run), (TaskState::Pending, 2), "the refused task alone is retried");
    let events = h.jm.task_events("b7", 1).await.expect("events");
    let why = events.iter().find(|e| e.reason == "LAUNCH_FAILED").map(|e| e.message.as_str()).unwrap_or_default();
    assert_eq!(why, "launch on h1 failed: task b7-1 refused");
    h.launcher.refuse_tasks.lock().expect("lock").clear();
    h.pump(&no_health, 10).await;
    let runs: Vec<(TaskState, u64)> =
        (0..3).map(|i| h.jm.task("b7", i).map(|t| (t.state, t.run)).expect("task")).collect();
    assert_eq!(runs, [(TaskState::Running, 1), (TaskState::Running, 2), (TaskState::Running, 1)]);
}

/// A launch refused again waits before its next try, 1 s then 2 s: a
/// refusal that lasts (a missing secret, a run the host still holds) must
/// not resubmit the task every few milliseconds with four store writes
/// each (found by scripts/torture: 26,000 runs of one task in nine minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_refused_again_waits_a_doubling_backoff_before_the_next_try() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.launcher.refuse.lock().expect("lock").insert("h1".into());
    h.jm.create("b6", config(JobKind::Batch, 1)).await.expect("create");
    assert_eq!(h.place().await, 1);
    let t = h.jm.task("b6", 0).expect("task");
    assert_eq!((t.state, t.run), (TaskState::Pending, 2), "the first refusal is retried at once");
    assert_eq!(h.place().await, 1);
    let t = h.jm.task("b6", 0).expect("task");
    assert_eq!((t.state, t.run, t.reason.as_str()), (TaskState::Initialized, 3, "LAUNCH_FAILED"));
    assert!(t.message.contains("refused"), "{}", t.message);
    for (wait, run) in [(1_000, 3), (2_000, 4)] {
        assert_eq!(h.place().await, 0, "nothing to place while run {run} waits");
        h.advance(wait - 1).await;
        assert_eq!(h.jm.task("b6", 0).expect("task").state, TaskState::Initialized, "run {run} after {} ms", wait - 1);
        h.advance(1).await;
        let t = h.jm.task("b6", 0).expect("task");
        assert_eq!((t.state, t.run), (TaskState::Pending, run), "run {run} submitted after {wait} ms");
        assert_eq!(h.place().await, 1);
    }
    // The host takes it now: the run after the wait launches and runs.
    h.launcher.refuse.lock().expect("lock").clear();
    h.advance(4_000).await;
    h.pump(&no_health, 10).await;
    let t = h.jm.task("b6", 0).expect("task");
    assert_eq!((t.state, t.run), (TaskState::Running, 5));
    assert_eq!(h.launcher.launches().len(), 1, "only the accepted launch is recorded");
}

/// One run update of `run_id` (of the harness's only host) with sequence `seq`.
fn update(run_id: &str, seq: u64, state: RunState, reason: &str, message: &str) -> paceline_model::run::RunUpdate {
    paceline_model::run::RunUpdate {
        host: "h1".into(),
        run_id: run_id.into(),
        task_id: run_id.split('-').next().unwrap_or_default().into(),
        seq,
        state,
        healthy: None,
        exit_code: (state == RunState::Succeeded).then_some(0),
        signal: None,
        reason: reason.into(),
        message: message.into(),
        at_ms: 0,
        ports: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_timeline_is_one_chain_in_the_order_the_run_went_through_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("tl", config(JobKind::Batch, 1)).await.expect("create");
    assert_eq!(h.place().await, 1);
    // STARTING on its own, then the agent's burst: RUNNING and the end
    // together (folded into one write). The manual clock stands still:
    // every event of the run shares one millisecond, so only the run's own
    // order sorts them.
    h.jm.on_run_update(&update("tl-0-1", 1, RunState::Starting, "STARTING", "sandbox ready"))
        .await
        .expect("start handled");
    let burst =
        [update("tl-0-1", 2, RunState::Running, "STARTED", ""), update("tl-0-1", 3, RunState::Succeeded, "EXITED", "")];
    for r in h.jm.on_run_updates(&burst).await {
        r.expect("burst handled");
    }
    let events = h.jm.task_events("tl", 0).await.expect("events");
    let timeline: Vec<(Option<TaskState>, TaskState)> = events.iter().rev().map(|e| (e.from, e.to)).collect();
    let states: Vec<TaskState> = timeline.iter().map(|(_, to)| *to).collect();
    assert_eq!(
        states,
        vec![
            TaskState::Placed,
            TaskState::Launching,
            TaskState::Launched,
            TaskState::Starting,
            TaskState::Running,
            TaskState::Succeeded
        ],
        "oldest first: {timeline:?}"
    );
    // Each event starts where the one before it ended: the run was RUNNING
    // when it succeeded, not LAUNCHED.
    for pair in timeline.windows(2) {
        assert_eq!(pair[1].0, Some(pair[0].1), "a gap in the chain: {timeline:?}");
    }
    // The end's event carries no message of an earlier state.
    let end = events.first().expect("an event");
    assert_eq!(end.to, TaskState::Succeeded);
    assert_eq!(end.message, "", "{end:?}");
}

/// Issue 45: a server SIGKILLed with launches in flight and restarted on its
/// store reconciles with the hosts; a run they never started comes back LOST
/// (RUN_MISSING) before any STARTING or RUNNING. That launch did not happen:
/// the task is placed again with no failure counted, and a job without a
/// restart policy still succeeds. A run lost after it ran still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_missing_before_it_started_is_placed_again_and_one_that_ran_still_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("nm", config(JobKind::Batch, 1)).await.expect("create");
    h.jm.create("rl", config(JobKind::Batch, 1)).await.expect("create");
    assert_eq!(h.place().await, 2);
    assert_eq!(h.jm.task("nm", 0).expect("task").state, TaskState::Launched);
    let missing = |run: &str| update(run, 1, RunState::Lost, "RUN_MISSING", "host h1 does not report the run");
    h.jm.on_run_update(&missing("nm-0-1")).await.expect("missing handled");
    let t = h.jm.task("nm", 0).expect("task");
    assert_eq!((t.state, t.run, t.failure_count), (TaskState::Pending, 2, 0), "{t:?}");
    assert_ne!(h.jm.get("nm").await.expect("get").runtime.state, JobState::Failed);
    h.pump(&no_health, 10).await;
    let runs: Vec<String> = h.launcher.launches().iter().map(|l| l.run.run_id.clone()).collect();
    assert!(runs.contains(&"nm-0-2".to_string()), "{runs:?}");
    h.report("nm-0-2", RunState::Succeeded, None).await;
    assert_eq!(h.jm.get("nm").await.expect("get").runtime.state, JobState::Succeeded);

    // RUNNING first (the harness's pump), then missing: LOST, counted.
    assert_eq!(h.jm.task("rl", 0).expect("task").state, TaskState::Running);
    h.jm.on_run_update(&update("rl-0-1", 2, RunState::Lost, "RUN_MISSING", "gone")).await.expect("handled");
    let t = h.jm.task("rl", 0).expect("task");
    assert_eq!((t.state, t.run, t.failure_count), (TaskState::Lost, 1, 1), "{t:?}");
    assert_eq!(h.jm.get("rl").await.expect("get").runtime.state, JobState::Failed);
}

/// Kills asked at once are handled together (one caller takes the queue,
/// distinct jobs concurrently, a second kill of the same job in a later
/// round): every caller gets its own answer, each run goes KILLING once, in
/// one write with its goal (one event RUNNING → KILLING), and its host is
/// asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_asked_at_once_are_combined_and_each_gets_its_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    let ids: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    for id in &ids {
        h.jm.create(id, config(JobKind::Batch, 3)).await.expect("create");
    }
    h.pump(&no_health, 10).await;
    assert!(ids.iter().all(|id| h.jm.task(id, 2).expect("task").state == TaskState::Running));
    let mut asks: Vec<(String, Option<Vec<u32>>)> = ids.iter().map(|id| (id.clone(), None)).collect();
    // The same job twice (all, then a part of it), and a job that does not exist.
    asks.insert(3, ("k0".to_string(), Some(vec![1])));
    asks.push(("nope".to_string(), None));
    let answers = futures::future::join_all(asks.iter().map(|(id, instances)| h.jm.kill(id, instances.clone()))).await;
    for ((id, _), answer) in asks.iter().zip(&answers) {
        if id == "nope" {
            assert!(matches!(answer, Err(paceline_jobmgr::JobError::NotFound(_))), "{answer:?}");
        } else {
            assert!(answer.is_ok(), "kill {id}: {answer:?}");
        }
    }
    for id in &ids {
        assert_eq!(h.jm.get(id).await.expect("get").runtime.state, JobState::Killing, "{id}");
        for i in 0..3 {
            let events = h.jm.task_events(id, i).await.expect("events");
            let killing: Vec<_> = events.iter().filter(|e| e.to == TaskState::Killing).collect();
            assert_eq!(killing.len(), 1, "{id}-{i}: {events:?}");
            assert_eq!(killing[0].from, Some(TaskState::Running), "{id}-{i}");
            assert_eq!(killing[0].reason, "KILL_REQUESTED", "{id}-{i}");
        }
    }
    // Every run's host asked (k0-1 may be asked twice: a repeated kill resends).
    let kills = h.launcher.kills();
    let runs: std::collections::BTreeSet<&str> = kills.iter().map(|(_, run)| run.as_str()).collect();
    assert_eq!(runs.len(), ids.len() * 3, "{kills:?}");
    assert!(kills.len() <= ids.len() * 3 + 1, "{kills:?}");
    h.pump(&no_health, 10).await;
    for id in &ids {
        let job = h.jm.get(id).await.expect("get");
        assert_eq!(job.runtime.state, JobState::Killed, "{id}");
        assert!(job.tasks.iter().all(|t| t.state == TaskState::Killed), "{id}");
    }
}

/// A whole job's kill writes the job's goal and no task (decision 0064):
/// until the hosts report, the store still holds each task as it was while
/// the API shows it KILLING with the goal KILL; each task is then written
/// once (KILLED), its history gaining both transitions, RUNNING → KILLING
/// (the kill's) and KILLING → KILLED (the host's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_jobs_kill_writes_each_task_once_when_its_run_ended() {
    use paceline_model::job::JobGoal;
    use paceline_model::task::TaskGoal;
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    let store = Harness::sqlite(&dir.path().join("jobs.sqlite"));
    h.jm.create("w", config(JobKind::Stateless, 4)).await.expect("create");
    h.pump(&no_health, 10).await;
    let before = store.tasks_of_job("w", &[]).await.expect("tasks");
    assert!(before.iter().all(|r| r.runtime.state == TaskState::Running), "{before:?}");
    h.jm.kill("w", None).await.expect("kill");
    assert_eq!(store.get_job_runtime("w").await.expect("job").goal, JobGoal::Kill, "the job's goal is durable");
    let stored = store.tasks_of_job("w", &[]).await.expect("tasks");
    for (b, s) in before.iter().zip(&stored) {
        assert_eq!(
            (s.runtime.version, s.runtime.state, s.runtime.goal),
            (b.runtime.version, TaskState::Running, TaskGoal::Run),
            "no task written by the kill: {s:?}"
        );
    }
    for i in 0..4 {
        let t = h.jm.task("w", i).expect("task");
        assert_eq!((t.state, t.goal, t.reason.as_str()), (TaskState::Killing, TaskGoal::Kill, "KILL_REQUESTED"));
        let events = h.jm.task_events("w", i).await.expect("events");
        assert_eq!(events[0].to, TaskState::Killing, "the kill's transition is shown before it is stored: {events:?}");
    }
    assert_eq!(h.launcher.kills().len(), 4, "every run's host asked");
    h.pump(&no_health, 10).await;
    let after = store.tasks_of_job("w", &[]).await.expect("tasks");
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a.runtime.version, b.runtime.version + 1, "one write per task: {a:?}");
        assert_eq!((a.runtime.state, a.runtime.goal), (TaskState::Killed, TaskGoal::Kill));
        let events = store.task_events("w", a.instance, 100).await.expect("events");
        let ends: Vec<(Option<TaskState>, TaskState)> = events.iter().map(|e| (e.from, e.to)).collect();
        let killing = ends.iter().filter(|e| **e == (Some(TaskState::Running), TaskState::Killing)).count();
        let killed = ends.iter().filter(|e| **e == (Some(TaskState::Killing), TaskState::Killed)).count();
        assert_eq!((killing, killed), (1, 1), "instance {}: {events:?}", a.instance);
    }
    assert_eq!(h.jm.get("w").await.expect("get").runtime.state, JobState::Killed);
}

/// Creates asked at once are entered and driven together (decision 0062):
/// every caller gets its own answer and key, a second create of one id is
/// refused without touching the first, each job's runtime is written as a
/// job created alone has it (a new manager over the same file recovers
/// every job), and every task runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_asked_at_once_are_combined_and_each_gets_its_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.sqlite");
    let ids: Vec<String> = (0..16).map(|i| format!("c{i}")).collect();
    let alone_state;
    {
        let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 1_000_000);
        h.jm.create("alone", config(JobKind::Batch, 2)).await.expect("create");
        alone_state = h.jm.get("alone").await.expect("get").runtime.state;
        let calls_before = wasm_calls(&h, "lifecycle/batch");
        let mut asks = ids.clone();
        // The same id twice: one create wins, the other is refused.
        asks.insert(5, "c0".to_string());
        let answers = futures::future::join_all(asks.iter().map(|id| h.jm.create(id, config(JobKind::Batch, 2)))).await;
        let keys: std::collections::BTreeSet<u64> = answers.iter().filter_map(|a| a.as_ref().ok().copied()).collect();
        assert_eq!(keys.len(), ids.len(), "one distinct key per job: {answers:?}");
        let refused: Vec<_> = answers.iter().filter(|a| a.is_err()).collect();
        assert_eq!(refused.len(), 1, "{answers:?}");
        // Refused by the job manager's memory or, when both were in flight
        // at once, by the store.
        let refusal = refused[0].as_ref().map(|_| String::new()).unwrap_or_else(|e| e.to_string());
        assert!(refusal.contains("already exists") && refusal.contains("c0"), "{refusal}");
        // Each created job's lifecycle heard `job-created` (the refused one's did not).
        let heard = wasm_calls(&h, "lifecycle/batch") - calls_before;
        assert_eq!(heard, ids.len() as u64, "lifecycle calls for {} creates", ids.len());
        for id in &ids {
            let job = h.jm.get(id).await.expect("get");
            assert_eq!(job.runtime.state, alone_state, "{id}");
            assert_eq!(job.tasks.len(), 2, "{id}");
        }
        h.pump(&no_health, 10).await;
        for id in &ids {
            let job = h.jm.get(id).await.expect("get");
            assert_eq!(job.runtime.state, JobState::Running, "{id}");
            assert!(job.tasks.iter().all(|t| t.state == TaskState::Running), "{id}: {:?}", job.tasks);
        }
        let launched: std::collections::BTreeSet<String> =
            h.launcher.launches().iter().map(|l| l.run.run_id.clone()).collect();
        assert_eq!(launched.len(), (ids.len() + 1) * 2, "each instance launched once: {launched:?}");
    }
    // Everything the combined creates answered is in the store.
    let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 2_000_000);
    assert_eq!(h.jm.recover().await.expect("recover"), ids.len() + 1);
    for id in &ids {
        let job = h.jm.get(id).await.expect("get");
        assert!(job.tasks.iter().all(|t| t.state == TaskState::Running), "{id}: {:?}", job.tasks);
    }
}

/// LAUNCHED is kept in memory and stored with the task's next write
/// (decision 0073): after the launch the store holds neither a LAUNCHED
/// runtime nor its event while the API shows both; the run's STARTING
/// stores it once, at the launch's time, before its own event. A task
/// killed before its host reports stores it with the kill's KILLING and
/// the host's KILLED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launched_is_stored_with_the_tasks_next_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    let store = Harness::sqlite(&dir.path().join("jobs.sqlite"));
    h.jm.create("lw", config(JobKind::Batch, 1)).await.expect("create");
    h.jm.create("lk", config(JobKind::Batch, 1)).await.expect("create");
    h.advance(3).await;
    assert_eq!(h.place().await, 2);
    let shown = h.jm.task_events("lw", 0).await.expect("events");
    assert_eq!(shown[0].to, TaskState::Launched, "the API shows it at once: {shown:?}");
    let launched_at = shown[0].at_ms;
    for id in ["lw", "lk"] {
        let stored = store.task_events(id, 0, 100).await.expect("events");
        assert!(stored.iter().all(|e| e.to != TaskState::Launched), "{id}: not stored yet: {stored:?}");
        let rt = store.tasks_of_job(id, &[]).await.expect("tasks")[0].runtime.clone();
        assert_eq!(rt.state, TaskState::Launching, "{id}");
    }

    h.advance(7).await;
    h.jm.on_run_update(&update("lw-0-1", 1, RunState::Starting, "STARTING", "")).await.expect("start handled");
    let stored = store.task_events("lw", 0, 100).await.expect("events");
    let launched: Vec<_> = stored.iter().filter(|e| e.to == TaskState::Launched).map(|e| (e.from, e.at_ms)).collect();
    assert_eq!(launched, [(Some(TaskState::Launching), launched_at)], "stored once: {stored:?}");
    // Events of one millisecond come from the store in no set order; the
    // API puts them in the run's.
    let shown = h.jm.task_events("lw", 0).await.expect("events");
    assert_eq!(shown.len(), stored.len(), "every event shown once: {shown:?}");
    let chain: Vec<(Option<TaskState>, TaskState, u64)> = shown.iter().rev().map(|e| (e.from, e.to, e.at_ms)).collect();
    assert_eq!(
        chain[1..],
        [
            (Some(TaskState::Placed), TaskState::Launching, launched_at),
            (Some(TaskState::Launching), TaskState::Launched, launched_at),
            (Some(TaskState::Launched), TaskState::Starting, launched_at + 7)
        ],
        "{chain:?}"
    );

    h.jm.kill("lk", None).await.expect("kill");
    assert_eq!(h.launcher.kills().len(), 1, "its host asked");
    h.report("lk-0-1", RunState::Killed, None).await;
    let stored = store.task_events("lk", 0, 100).await.expect("events");
    let shown = h.jm.task_events("lk", 0).await.expect("events");
    assert_eq!(shown.len(), stored.len(), "every event stored: {stored:?}");
    let ends: Vec<(Option<TaskState>, TaskState)> = shown.iter().rev().map(|e| (e.from, e.to)).skip(2).collect();
    assert_eq!(
        ends,
        [
            (Some(TaskState::Launching), TaskState::Launched),
            (Some(TaskState::Launched), TaskState::Killing),
            (Some(TaskState::Killing), TaskState::Killed)
        ],
        "{shown:?}"
    );
}

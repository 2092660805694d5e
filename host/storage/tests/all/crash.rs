//! A writer killed between the writes of one job create (decision 0033):
//! the test runs this binary again as a child with a crash point armed
//! (`PACELINE_CRASH_POINT`); the child creates a job with 250 tasks and
//! ends in the middle; the parent then checks that no read sees any of
//! that job, that the leader's start removes what was written, and that
//! the id can be used again.

use std::process::Command;
use std::sync::Arc;

use paceline_model::job::JobRuntime;
use paceline_model::task::TaskRuntime;
use paceline_storage::{JobQuery, Store};

/// Where the child finds its store and what it creates.
const CHILD_STORE: &str = "PACELINE_CRASH_TEST_STORE";
const CHILD_JOB: &str = "PACELINE_CRASH_TEST_JOB";
const CHILD_OWNER: &str = "PACELINE_CRASH_TEST_OWNER";

/// The child's part: create the job (the armed crash point ends the process).
pub async fn child_create(store: Arc<dyn Store>) {
    let (Ok(id), Ok(owner)) = (std::env::var(CHILD_JOB), std::env::var(CHILD_OWNER)) else {
        panic!("run by the crash tests as a child, with {CHILD_JOB} and {CHILD_OWNER}");
    };
    let tasks: Vec<(u32, TaskRuntime)> = (0..250).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
    let config = crate::conformance::config(&owner, 250);
    store.create_job_with_tasks(&id, &config, &JobRuntime::initial(1, 0), &tasks).await.expect("create");
    panic!("the crash point {:?} was not reached", std::env::var(paceline_storage::crash::CRASH_POINT_VAR));
}

/// Runs test `child` of this binary with the crash point `point` armed.
pub fn run_child(child: &str, point: &str, store: &str, id: &str, owner: &str) {
    let exe = std::env::current_exe().expect("this test binary");
    let out = Command::new(exe)
        .args([child, "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(paceline_storage::crash::CRASH_POINT_VAR, point)
        .env(CHILD_STORE, store)
        .env(CHILD_JOB, id)
        .env(CHILD_OWNER, owner)
        .output()
        .expect("run the child");
    // Ended by the crash point (abort), not by a pass or a test failure.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(6),
        "the child should have aborted at {point}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The store the child was given.
pub fn child_store_arg() -> String {
    std::env::var(CHILD_STORE).expect("run by the crash tests as a child")
}

/// After the crash: nothing visible, recovery removes the rest, the id is free.
pub async fn nothing_of_the_job_is_seen(store: Arc<dyn Store>, id: &str, owner: &str) {
    assert!(store.get_job_runtime(id).await.expect_err("not created").is_not_found());
    let mine = JobQuery { owner: Some(owner.to_string()), limit: 10, ..Default::default() };
    assert!(store.query_jobs(&mine).await.expect("query").items.is_empty());
    let all = store.query_jobs(&JobQuery { limit: 1000, ..Default::default() }).await.expect("scan");
    assert!(all.items.iter().all(|j| j.id != id), "a listing does not show it");
    assert!(store.live_jobs().await.expect("live").iter().all(|j| j.id != id), "recovery would not load it");
    let removed = store.remove_interrupted_creates().await.expect("remove");
    assert!(removed.is_empty() || removed == [id.to_string()], "only the job cut short: {removed:?}");
    assert!(store.tasks_of_job(id, &[]).await.expect("tasks").is_empty(), "its tasks are gone");
    assert!(store.get_job_config(id, None).await.expect_err("its config is gone").is_not_found());
    assert!(store.remove_interrupted_creates().await.expect("again").is_empty(), "nothing left to remove");
    let tasks: Vec<(u32, TaskRuntime)> = (0..3).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
    store
        .create_job_with_tasks(id, &crate::conformance::config(owner, 3), &JobRuntime::initial(1, 0), &tasks)
        .await
        .expect("the id is free again");
    assert_eq!(store.tasks_of_job(id, &[]).await.expect("tasks").len(), 3, "no task of the first attempt");
}

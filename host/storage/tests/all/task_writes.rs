//! Conformance of `Store::cas_tasks_with_events`: task runtimes and their
//! events in one call, each event kept only with its instance's write.

use std::sync::Arc;

use paceline_model::job::JobRuntime;
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use paceline_storage::{Store, TaskCas};

use crate::conformance::{config, unique};

fn event(to: TaskState, at_ms: u64) -> TaskEvent {
    TaskEvent { run: 1, from: None, to, at_ms, host: Some("h1".into()), reason: "R".into(), message: String::new() }
}

/// A write that wins stores its events, one that loses stores none, and an
/// event of an instance not written is stored as it is; the results are
/// those of `cas_tasks`.
pub async fn task_writes_carry_their_events_and_a_lost_write_stores_none(s: Arc<dyn Store>) {
    let id = unique("tw");
    let tasks: Vec<(u32, TaskRuntime)> = (0..3).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
    s.create_job_with_tasks(&id, &config(&unique("o"), 3), &JobRuntime::initial(1, 0), &tasks).await.expect("job");
    let mut running = TaskRuntime::initial(1, 0);
    running.state = TaskState::Running;
    let writes = [
        TaskCas { instance: 0, expected_version: 1, runtime: running.clone() },
        TaskCas { instance: 1, expected_version: 9, runtime: running.clone() },
    ];
    let events = [
        (0, event(TaskState::Placed, 10)),
        (0, event(TaskState::Running, 11)),
        (1, event(TaskState::Running, 12)),
        (2, event(TaskState::Pending, 13)),
    ];
    let results = s.cas_tasks_with_events(&id, &writes, &events).await.expect("call");
    assert_eq!(results[0].as_ref().ok(), Some(&2));
    assert!(results[1].as_ref().expect_err("stale").is_conflict());
    assert_eq!(s.get_task(&id, 0).await.expect("task 0").state, TaskState::Running);
    assert_eq!(s.get_task(&id, 1).await.expect("task 1").state, TaskState::Initialized);

    assert_eq!(times(&*s, &id, 0).await, vec![11, 10], "the winner's events, newest first");
    assert!(times(&*s, &id, 1).await.is_empty(), "the lost write's event is not stored");
    assert_eq!(times(&*s, &id, 2).await, vec![13], "an event of an instance not written is stored");
}

/// When an instance's stored events happened, newest first.
async fn times(s: &dyn Store, job_id: &str, instance: u32) -> Vec<u64> {
    s.task_events(job_id, instance, 10).await.expect("events").into_iter().map(|e| e.at_ms).collect()
}

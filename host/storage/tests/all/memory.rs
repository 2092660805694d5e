//! The in-memory backend (the simulator's): the conformance suite, and that
//! taking the event log empties it.

use std::sync::Arc;

use paceline_model::job::JobRuntime;
use paceline_model::task::{TaskEvent, TaskState};
use paceline_storage::Store;
use paceline_storage::memory::MemoryStore;

async fn make() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

crate::conformance_suite!(make);

#[tokio::test]
async fn taking_the_event_log_hands_over_every_event_once_in_append_order() {
    let s = MemoryStore::new();
    s.create_job("j", &crate::conformance::config("o", 2), &JobRuntime::initial(1, 0)).await.expect("job");
    let ev = |to: TaskState, at_ms: u64| TaskEvent {
        run: 1,
        from: None,
        to,
        at_ms,
        host: None,
        reason: String::new(),
        message: String::new(),
    };
    s.append_job_events("j", &[(1, ev(TaskState::Pending, 5)), (0, ev(TaskState::Pending, 5))]).await.expect("append");
    s.append_task_events("j", 0, &[ev(TaskState::Running, 9)]).await.expect("append");
    let taken = s.take_events();
    let order: Vec<(u32, TaskState)> = taken.iter().map(|(_, i, e)| (*i, e.to)).collect();
    assert_eq!(order, vec![(1, TaskState::Pending), (0, TaskState::Pending), (0, TaskState::Running)]);
    assert!(s.take_events().is_empty(), "each event is handed over once");
    assert!(s.task_events("j", 0, 10).await.expect("events").is_empty(), "and forgotten by the store");
}

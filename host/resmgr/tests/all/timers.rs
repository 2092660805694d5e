//! State timeouts at scale: the timer entries of tasks that moved on are
//! dropped, while live ones still fire.

use paceline_model::job::JobKind;
use paceline_resmgr::{TaskState, Timeouts, Transition};

use crate::common::gang;
use crate::tasks::world_with;

#[test]
fn timers_of_tasks_that_moved_on_are_dropped_and_a_live_one_still_fires() {
    let mut rm = world_with(Timeouts { placing_ms: 60_000, launching_ms: 60_000, ..Timeouts::default() });
    for job in 0..10_000 {
        rm.submit("/a", gang(job, 1, 10), 0).expect("job");
    }
    rm.tick(0);
    let mut out = Vec::new();
    assert_eq!(rm.take_ready(JobKind::Batch, 20_000, 0, &mut out), 10_000);
    // All but the last reach RUNNING: each left a PLACING and a LAUNCHING
    // timer behind, due a minute later.
    let (last, rest) = out.split_last().expect("tasks");
    for t in rest {
        rm.transition(t.id, Transition::Placed, 1).expect("placed");
        rm.transition(t.id, Transition::StartLaunch, 1).expect("launch");
        rm.transition(t.id, Transition::Running, 1).expect("running");
    }
    assert!(rm.timer_entries() >= 2 * rest.len(), "{} entries", rm.timer_entries());
    rm.tick(2);
    assert_eq!(rm.timer_entries(), 1, "only the PLACING task's timer is live");
    // The live one fires when due; the running tasks stay running.
    let report = rm.tick(60_001);
    assert_eq!(report.timeouts, 1);
    assert_eq!(rm.task(last.id).map(|t| t.state), Some(TaskState::Ready));
    assert!(rest.iter().all(|t| rm.task(t.id).map(|i| i.state) == Some(TaskState::Running)));
}

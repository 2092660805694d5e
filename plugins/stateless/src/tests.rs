use super::*;
use paceline_plugin_sdk::harness::{Expect, Input, Scenario, run_lifecycle};

fn t(instance: u32, state: TaskState, version: u64) -> TaskView {
    TaskView { instance, state, config_version: version, run: 1, ..TaskView::default() }
}

fn job(n: u32, update: Option<UpdateView>) -> JobView {
    JobView {
        kind: JobKind::Stateless,
        instance_count: n,
        state: JobState::Running,
        config_version: 1,
        update,
        ..JobView::default()
    }
}

fn upd(batch: u32, done: Vec<u32>, in_flight: Vec<u32>, failed: Vec<u32>) -> Option<UpdateView> {
    Some(UpdateView {
        target_version: 2,
        batch_size: batch,
        max_failures: 1,
        rollback_on_failure: true,
        done,
        in_flight,
        failed,
        ..UpdateView::default()
    })
}

fn scenario(name: &str, job: JobView, tasks: Vec<TaskView>, event: Event, expect: Vec<Action>) -> Scenario {
    Scenario {
        name: name.into(),
        input: Input::Lifecycle { job, tasks, event },
        expect: Some(Expect::Lifecycle(expect)),
    }
}

#[test]
fn scenarios() {
    use TaskState::*;
    let run4 = || (0..4).map(|i| t(i, Running, 1)).collect::<Vec<_>>();
    let cases = vec![
        scenario(
            "created launches all",
            job(2, None),
            vec![t(0, Initialized, 1), t(1, Initialized, 1)],
            Event::JobCreated,
            vec![Action::Launch(0), Action::Launch(1)],
        ),
        scenario(
            "scale down kills the top",
            job(2, None),
            run4(),
            Event::Scaled,
            vec![Action::Kill(2), Action::Kill(3)],
        ),
        scenario(
            "failure restarts with backoff",
            job(2, None),
            vec![TaskView { failures: 2, ..t(0, Failed, 1) }, t(1, Running, 1)],
            Event::TaskChanged(TaskChange { instance: 0, state: Failed }),
            vec![Action::RestartAfter(Restart { instance: 0, delay_ms: 2_000 })],
        ),
        scenario(
            "update starts first batch",
            job(4, upd(2, vec![], vec![], vec![])),
            run4(),
            Event::UpdateChanged,
            vec![Action::UpdateBatch(vec![0, 1])],
        ),
        scenario(
            "update waits for batch",
            job(4, upd(2, vec![], vec![0, 1], vec![])),
            run4(),
            Event::UpdateChanged,
            vec![],
        ),
        scenario(
            "update next batch",
            job(4, upd(2, vec![0, 1], vec![], vec![])),
            vec![t(0, Running, 2), t(1, Running, 2), t(2, Running, 1), t(3, Running, 1)],
            Event::TaskChanged(TaskChange { instance: 1, state: Running }),
            vec![Action::UpdateBatch(vec![2, 3])],
        ),
        scenario(
            "update done",
            job(2, upd(2, vec![0, 1], vec![], vec![])),
            vec![t(0, Running, 2), t(1, Running, 2)],
            Event::TaskChanged(TaskChange { instance: 1, state: Running }),
            vec![Action::UpdateFinished(false)],
        ),
        scenario(
            "too many failures roll back",
            job(4, upd(2, vec![], vec![], vec![0, 1])),
            run4(),
            Event::UpdateChanged,
            vec![Action::UpdateFinished(true)],
        ),
        scenario(
            "paused does nothing",
            job(4, upd(2, vec![], vec![], vec![]).map(|u| UpdateView { paused: true, ..u })),
            run4(),
            Event::UpdateChanged,
            vec![],
        ),
        scenario("kill", job(4, None), run4(), Event::KillRequested, (0..4).map(Action::Kill).collect()),
    ];
    for s in &cases {
        run_lifecycle::<Stateless>(s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    }
}

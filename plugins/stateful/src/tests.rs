use super::*;
use paceline_plugin_sdk::harness::{Expect, Input, Scenario, run_lifecycle};

fn t(instance: u32, state: TaskState, version: u64) -> TaskView {
    TaskView {
        instance,
        state,
        config_version: version,
        run: 1,
        host: Some(format!("h{instance}")),
        ..TaskView::default()
    }
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
    let job = |update| JobView {
        kind: JobKind::Stateful,
        instance_count: 3,
        state: JobState::Running,
        update,
        ..JobView::default()
    };
    let upd = |done: Vec<u32>| Some(UpdateView { target_version: 2, batch_size: 3, done, ..UpdateView::default() });
    let cases = vec![
        scenario(
            "restart in place after a failure",
            job(None),
            vec![TaskView { failures: 1, ..t(0, Failed, 1) }, t(1, Running, 1), t(2, Running, 1)],
            Event::TaskChanged(TaskChange { instance: 0, state: Failed }),
            vec![Action::RestartAfter(Restart { instance: 0, delay_ms: 1_000 })],
        ),
        scenario(
            "update one at a time even with batch 3",
            job(upd(vec![])),
            (0..3).map(|i| t(i, Running, 1)).collect(),
            Event::UpdateChanged,
            vec![Action::UpdateBatch(vec![0])],
        ),
        scenario(
            "update in order",
            job(upd(vec![0])),
            vec![t(0, Running, 2), t(1, Running, 1), t(2, Running, 1)],
            Event::TaskChanged(TaskChange { instance: 0, state: Running }),
            vec![Action::UpdateBatch(vec![1])],
        ),
    ];
    for s in &cases {
        run_lifecycle::<Stateful>(s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    }
}

use super::*;
use paceline_plugin_sdk::harness::{Expect, Input, Scenario, run_lifecycle};

fn t(instance: u32, state: TaskState, failures: u32) -> TaskView {
    TaskView { instance, state, failures, run: 1, ..TaskView::default() }
}

fn job(n: u32, max_failures: u32) -> JobView {
    JobView {
        kind: JobKind::Batch,
        instance_count: n,
        max_failures_per_instance: max_failures,
        state: JobState::Running,
        ..JobView::default()
    }
}

fn scenario(name: &str, job: JobView, tasks: Vec<TaskView>, event: Event, expect: Vec<Action>) -> Scenario {
    Scenario {
        name: name.into(),
        input: Input::Lifecycle { job, tasks, event },
        expect: Some(Expect::Lifecycle(expect)),
    }
}

fn changed(instance: u32, state: TaskState) -> Event {
    Event::TaskChanged(TaskChange { instance, state })
}

#[test]
fn scenarios() {
    use TaskState::*;
    let cases = vec![
        scenario(
            "created launches all",
            job(2, 3),
            vec![t(0, Initialized, 0), t(1, Initialized, 0)],
            Event::JobCreated,
            vec![Action::Launch(0), Action::Launch(1)],
        ),
        scenario(
            "first failure retries after backoff",
            job(2, 3),
            vec![t(0, Failed, 1), t(1, Running, 0)],
            changed(0, Failed),
            vec![Action::RestartAfter(Restart { instance: 0, delay_ms: 1_000 })],
        ),
        scenario(
            "third failure backs off 4s",
            job(2, 3),
            vec![t(0, Failed, 3), t(1, Running, 0)],
            changed(0, Failed),
            vec![Action::RestartAfter(Restart { instance: 0, delay_ms: 4_000 })],
        ),
        scenario(
            "budget spent fails the job",
            job(2, 3),
            vec![t(0, Failed, 4), t(1, Running, 0)],
            changed(0, Failed),
            vec![Action::MarkJob(JobState::Failed)],
        ),
        scenario(
            "all succeeded",
            job(2, 3),
            vec![t(0, Succeeded, 0), t(1, Succeeded, 1)],
            changed(1, Succeeded),
            vec![Action::MarkJob(JobState::Succeeded)],
        ),
        scenario(
            "one still running",
            job(2, 3),
            vec![t(0, Succeeded, 0), t(1, Running, 1)],
            changed(0, Succeeded),
            vec![],
        ),
        scenario(
            "overrun is killed",
            JobView { max_run_time_ms: 10_000, ..job(1, 0) },
            vec![TaskView { running_for_ms: Some(10_000), ..t(0, Running, 0) }],
            Event::Timer(0),
            vec![Action::Kill(0)],
        ),
        scenario(
            "timer before the limit does nothing",
            JobView { max_run_time_ms: 10_000, ..job(1, 0) },
            vec![TaskView { running_for_ms: Some(9_000), ..t(0, Running, 0) }],
            Event::Timer(0),
            vec![],
        ),
        scenario(
            "kill requested",
            job(2, 0),
            vec![t(0, Running, 0), t(1, Succeeded, 0)],
            Event::KillRequested,
            vec![Action::Kill(0)],
        ),
        scenario(
            "finished job answers nothing",
            JobView { state: JobState::Failed, ..job(1, 0) },
            vec![t(0, Failed, 5)],
            changed(0, Failed),
            vec![],
        ),
    ];
    for s in &cases {
        run_lifecycle::<Batch>(s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    }
}

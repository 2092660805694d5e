use super::*;
use paceline_plugin_sdk::harness::{Expect, Input, Scenario, run_lifecycle};

fn t(instance: u32, state: TaskState) -> TaskView {
    TaskView { instance, state, config_version: 1, run: 1, host: Some(format!("h{instance}")), ..TaskView::default() }
}

fn job(hosts: &[&str]) -> JobView {
    JobView {
        kind: JobKind::Daemon,
        instance_count: hosts.len() as u32,
        state: JobState::Running,
        matching_hosts: hosts.iter().map(|h| h.to_string()).collect(),
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

#[test]
fn scenarios() {
    use TaskState::*;
    let cases = vec![
        scenario(
            "one per host",
            job(&["a", "b"]),
            vec![t(0, Initialized), t(1, Initialized)],
            Event::JobCreated,
            vec![Action::Launch(0), Action::Launch(1)],
        ),
        scenario(
            "a host joins",
            job(&["a", "b", "c"]),
            vec![t(0, Running), t(1, Running)],
            Event::HostsChanged,
            vec![Action::Launch(2)],
        ),
        scenario(
            "a host drains",
            job(&["a", "", "c"]),
            vec![t(0, Running), t(1, Running), t(2, Running)],
            Event::HostsChanged,
            vec![Action::Kill(1)],
        ),
        scenario(
            "a failed daemon restarts on its host",
            job(&["a"]),
            vec![TaskView { failures: 1, ..t(0, Failed) }],
            Event::TaskChanged(TaskChange { instance: 0, state: Failed }),
            vec![Action::RestartAfter(Restart { instance: 0, delay_ms: 1_000 })],
        ),
        scenario(
            "a daemon of a gone host stays down",
            job(&[""]),
            vec![TaskView { failures: 1, ..t(0, Failed) }],
            Event::TaskChanged(TaskChange { instance: 0, state: Failed }),
            vec![],
        ),
    ];
    for s in &cases {
        run_lifecycle::<Daemon>(s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    }
}

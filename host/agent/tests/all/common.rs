//! Shared harness: a supervisor on a temp data dir and helpers that wait
//! for a run's updates.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use paceline_agent::spec::{HealthSpec, Probe};
use paceline_agent::{Isolation, IsolationChoice, RunSpec, Supervisor, SupervisorConfig};
use paceline_model::Resources;
use paceline_proto::agent::v1 as pb;
use tokio::sync::broadcast;

/// Each harness gets its own port range so tests running in parallel never
/// race for the same port. Below Linux's ephemeral range (32768 up): a
/// range in it (42000 up, before) failed in CI when an outgoing connection
/// of another process took one of its ports as its source port ("port
/// 42016 is held by another run, bound by another process"). Not where
/// `paceline dev` gives task ports (20000–21999).
static NEXT_RANGE: AtomicU16 = AtomicU16::new(24000);

pub fn port_range() -> (u16, u16) {
    let first = NEXT_RANGE.fetch_add(20, Ordering::SeqCst);
    (first, first + 19)
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub sup: Supervisor,
    pub events: broadcast::Receiver<pb::StatusUpdate>,
    pub range: (u16, u16),
}

pub fn config(dir: &std::path::Path, range: (u16, u16)) -> SupervisorConfig {
    SupervisorConfig {
        data_dir: dir.to_owned(),
        total: Resources { cpu_millis: 8000, memory_mib: 16384, disk_mib: 100_000, gpu_milli: 0, ports: 0 },
        port_range: range,
        isolation: isolation(),
        default_kill_grace: Duration::from_secs(5),
        gpu_devices: Vec::new(),
        gpu_memory_mib: Vec::new(),
        adopt_poll: Duration::from_millis(50),
        task_users: paceline_agent::TaskUsers::Agent { why: "the agent's own tests".to_owned() },
    }
}

pub fn isolation() -> Isolation {
    Isolation::detect(IsolationChoice::Auto)
}

pub async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let range = port_range();
    let sup = Supervisor::open(config(dir.path(), range)).await.unwrap();
    let events = sup.subscribe();
    Harness { dir, sup, events, range }
}

impl Harness {
    /// Reopens a supervisor on the same data dir (after `detach`).
    pub async fn reopen(&mut self) {
        self.sup.detach();
        self.sup = Supervisor::open(config(self.dir.path(), self.range)).await.unwrap();
        self.events = self.sup.subscribe();
    }
}

pub fn spec(run_id: &str, command: &str, args: &[&str]) -> RunSpec {
    RunSpec {
        run_id: run_id.to_owned(),
        task_id: run_id.rsplit_once('-').map(|(t, _)| t.to_owned()).unwrap_or_else(|| run_id.to_owned()),
        command: command.to_owned(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        resources: Resources { cpu_millis: 100, memory_mib: 0, disk_mib: 0, gpu_milli: 0, ports: 0 },
        port_names: Vec::new(),
        health_check: None,
        volume: None,
        kill_grace_period_secs: 5,
        stop_signal: String::new(),
        secrets: Vec::new(),
        gpu: Default::default(),
        gang: None,
        user: None,
    }
}

pub fn sh(run_id: &str, script: &str) -> RunSpec {
    spec(run_id, "sh", &["-c", script])
}

pub fn health(probe: Probe, interval_secs: u32, failures: u32) -> HealthSpec {
    HealthSpec { probe, initial_delay_secs: 0, interval_secs, timeout_secs: 2, max_consecutive_failures: failures }
}

pub fn state(u: &pb::StatusUpdate) -> pb::RunState {
    pb::RunState::try_from(u.state).unwrap()
}

pub fn is_terminal(u: &pb::StatusUpdate) -> bool {
    matches!(state(u), pb::RunState::Succeeded | pb::RunState::Failed | pb::RunState::Killed | pb::RunState::Lost)
}

/// Collects `run_id`'s updates until one satisfies `until` (included).
pub async fn wait_for(
    events: &mut broadcast::Receiver<pb::StatusUpdate>,
    run_id: &str,
    timeout: Duration,
    until: impl Fn(&pb::StatusUpdate) -> bool,
) -> Vec<pb::StatusUpdate> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(u)) if u.run_id == run_id => {
                let done = until(&u);
                seen.push(u);
                if done {
                    return seen;
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("event stream: {e}"),
            Err(_) => panic!("timed out waiting for {run_id}; saw {seen:#?}"),
        }
    }
}

pub async fn wait_terminal(
    events: &mut broadcast::Receiver<pb::StatusUpdate>,
    run_id: &str,
    timeout: Duration,
) -> Vec<pb::StatusUpdate> {
    wait_for(events, run_id, timeout, is_terminal).await
}

pub fn states(updates: &[pb::StatusUpdate]) -> Vec<pb::RunState> {
    updates.iter().map(state).collect()
}

pub fn stdout(sup: &Supervisor, run_id: &str) -> String {
    String::from_utf8(sup.read_log(run_id, "stdout", 0, 0).unwrap().data).unwrap()
}

/// Waits until the run's stdout contains `needle`.
pub async fn wait_stdout(sup: &Supervisor, run_id: &str, needle: &str) {
    for _ in 0..200 {
        if stdout(sup, run_id).contains(needle) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{run_id} never printed {needle:?}");
}

//! The launch-throughput figure: one supervisor starts `n` trivial tasks
//! (`true`) and waits until all reported SUCCEEDED. The budget is 100 tasks
//! in at most 3 s.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use paceline_model::Resources;
use paceline_proto::agent::v1 as pb;

use crate::error::AgentError;
use crate::isolation::Isolation;
use crate::spec::RunSpec;
use crate::supervisor::{Supervisor, SupervisorConfig};

/// What [`bench_launch`] measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchFigures {
    /// Tasks launched.
    pub tasks: usize,
    /// Tasks that reported SUCCEEDED.
    pub succeeded: usize,
    /// From the first launch until every launch was accepted.
    pub accepted_after: Duration,
    /// From the first launch until every task reported a terminal state.
    pub ended_after: Duration,
    /// Status updates made durable in that time.
    pub updates: usize,
}

impl std::fmt::Display for BenchFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tasks: {} SUCCEEDED; all accepted after {:.0} ms, all ended after {:.0} ms ({} durable updates)",
            self.tasks,
            self.succeeded,
            self.accepted_after.as_secs_f64() * 1000.0,
            self.ended_after.as_secs_f64() * 1000.0,
            self.updates
        )
    }
}

/// Launches `n` runs of `true` on a fresh supervisor in `data_dir` (which
/// should be empty) with `isolation`, and measures how long until all ended.
/// Gives up after `timeout`.
pub async fn bench_launch(
    data_dir: &Path,
    n: usize,
    isolation: Isolation,
    timeout: Duration,
) -> Result<BenchFigures, AgentError> {
    let sup = Supervisor::open(SupervisorConfig {
        data_dir: data_dir.to_owned(),
        total: Resources { cpu_millis: 1_000_000, memory_mib: 1_000_000, disk_mib: 1_000_000, gpu_milli: 0, ports: 0 },
        port_range: (40000, 40099),
        isolation,
        default_kill_grace: Duration::from_secs(1),
        gpu_devices: Vec::new(),
        gpu_memory_mib: Vec::new(),
        adopt_poll: Duration::from_millis(250),
        task_users: crate::TaskUsers::Agent { why: "the benchmark measures launches, not users".to_owned() },
    })
    .await?;
    let mut events = sup.subscribe();
    let start = Instant::now();
    for i in 0..n {
        let spec = RunSpec {
            run_id: format!("bench-{i}-1"),
            task_id: format!("bench-{i}"),
            command: "true".to_owned(),
            args: Vec::new(),
            env: Default::default(),
            resources: Resources { cpu_millis: 10, memory_mib: 64, disk_mib: 0, gpu_milli: 0, ports: 0 },
            port_names: Vec::new(),
            health_check: None,
            volume: None,
            kill_grace_period_secs: 1,
            stop_signal: String::new(),
            secrets: Vec::new(),
            gpu: Default::default(),
            gang: None,
            user: None,
        };
        sup.launch_spec(spec)?;
    }
    let accepted_after = start.elapsed();
    let mut ended = HashSet::new();
    let mut succeeded = 0;
    let mut updates = 0;
    let deadline = tokio::time::Instant::now() + timeout;
    while ended.len() < n {
        let update = match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(u)) => u,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => continue,
            Ok(Err(_)) | Err(_) => break,
        };
        updates += 1;
        let state = pb::RunState::try_from(update.state).unwrap_or(pb::RunState::Unspecified);
        if matches!(state, pb::RunState::Succeeded | pb::RunState::Failed | pb::RunState::Killed | pb::RunState::Lost)
            && ended.insert(update.run_id.clone())
            && state == pb::RunState::Succeeded
        {
            succeeded += 1;
        }
    }
    let ended_after = start.elapsed();
    sup.detach();
    Ok(BenchFigures { tasks: n, succeeded, accepted_after, ended_after, updates })
}

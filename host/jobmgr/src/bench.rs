//! `paceline bench jobmgr`: how long creating a 10,000-instance batch job
//! takes on SQLite until every task is handed to the resource manager, how
//! long killing it takes while every gang still waits, and
//! how many goal-state transitions per second the engine's table and
//! in-memory task runtimes sustain.

use std::sync::Arc;
use std::time::Instant;

use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::task::{TaskGoal, TaskRuntime, TaskSpec, TaskState};
use paceline_plugin::{MemoryStore, PluginRuntime, Registry, RuntimeConfig};

use crate::scenario::Harness;
use crate::table::{self, GoalAction};

/// The figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BenchReport {
    /// Instances in the created job.
    pub instances: u32,
    /// Milliseconds from `create` to every task PENDING in the resource manager.
    pub create_ms: f64,
    /// Gangs queued in the resource manager afterwards.
    pub gangs_submitted: u64,
    /// Milliseconds to kill the whole job while every gang still waits
    /// (each run withdrawn, written KILLED, its gang cancelled).
    pub kill_queued_ms: f64,
    /// Gangs and tasks the pool still holds after that kill (0 is right).
    pub held_after_kill: u64,
    /// Goal-state transitions applied in memory.
    pub transitions: u64,
    /// Transitions per second.
    pub transitions_per_sec: f64,
}

/// Runs both measurements; `dir` holds the SQLite file.
pub async fn run(dir: &std::path::Path, instances: u32) -> Result<BenchReport, String> {
    let store = Harness::sqlite(&dir.join("bench.sqlite"));
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).map_err(|e| e.to_string())?);
    let registry = Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).map_err(|e| e.to_string())?);
    let h = Harness::new(store, registry, &["h1"], 1_000);
    let config = JobConfig {
        name: "bench".into(),
        owner: "bench".into(),
        pool: "/test".into(),
        kind: JobKind::Batch,
        instance_count: instances,
        default_task: TaskSpec {
            command: "true".into(),
            resources: Resources::new(100, 64, 0, 0),
            ..TaskSpec::default()
        },
        ..JobConfig::default()
    };
    let started = Instant::now();
    h.jm.create("bench-job", config).await.map_err(|e| e.to_string())?;
    let create_ms = started.elapsed().as_secs_f64() * 1000.0;
    let gangs_submitted = held(&h)?;
    let started = Instant::now();
    h.jm.kill("bench-job", None).await.map_err(|e| e.to_string())?;
    let kill_queued_ms = started.elapsed().as_secs_f64() * 1000.0;
    let held_after_kill = held(&h)?;
    let (transitions, secs) = transitions_in_memory(200_000);
    Ok(BenchReport {
        instances,
        create_ms,
        gangs_submitted,
        kill_queued_ms,
        held_after_kill,
        transitions,
        transitions_per_sec: transitions as f64 / secs,
    })
}

/// Gangs queued and tasks live in the bench's pool.
fn held(h: &Harness) -> Result<u64, String> {
    let rm = h.resmgr.lock().map_err(|e| e.to_string())?;
    Ok(rm.pool_status("/test").map(|s| s.queued_gangs + s.live_tasks).unwrap_or(0))
}

/// Drives `tasks` task runtimes through a whole life (submit, place,
/// launch, run, succeed): for each step the goal-state table is consulted
/// and the transition checked against the state table, then applied to the
/// in-memory runtime. Returns (transitions, seconds).
pub fn transitions_in_memory(tasks: usize) -> (u64, f64) {
    let mut rts: Vec<TaskRuntime> = (0..tasks).map(|_| TaskRuntime::initial(1, 0)).collect();
    let path = [
        TaskState::Pending,
        TaskState::Placed,
        TaskState::Launching,
        TaskState::Launched,
        TaskState::Running,
        TaskState::Succeeded,
    ];
    let started = Instant::now();
    let mut n = 0u64;
    for step in path {
        for (i, rt) in rts.iter_mut().enumerate() {
            let a = table::action(rt.state, TaskGoal::Run);
            // PENDING → PLACED is the resource manager's part (READY, PLACING) seen from here.
            let allowed =
                rt.state.can_transition(step) || (rt.state == TaskState::Pending && step == TaskState::Placed);
            if allowed && std::hint::black_box(a) != GoalAction::Done {
                rt.state = step;
                rt.updated_at_ms = i as u64;
                rt.version += 1;
                n += 1;
            }
        }
    }
    (n, started.elapsed().as_secs_f64().max(1e-9))
}

//! [`JobManager`]: the API (create, get, query, kill, restart, update,
//! delete), the joints the placement engine and wiring call, and the
//! goal-state engine's effects.
//!
//! Concurrency: every mutating call takes `ops` (an async mutex) for its
//! whole duration, so the engine is one writer and compare-and-set
//! conflicts mean another process wrote (they surface as errors). Calls
//! that touch many jobs (placements, run updates, kills asked together,
//! see `kills.rs`) handle distinct jobs concurrently within one hold, so
//! their writes share the store's group commits. The
//! in-memory mirror sits behind a plain mutex that is never held across an
//! `.await`, so the synchronous readers ([`JobManager::need_of`],
//! [`JobManager::expected_runs`]) never wait on storage. Lock order: the
//! resource manager's mutex, then the mirror's.

mod admission;
mod api;
mod creates;
mod events;
mod gang;
mod gate;
mod goal;
mod hosts;
mod kills;
mod launch;
mod lease;
mod lifecycle;
mod pending;
mod recover;
mod runs;
mod secrets;
mod tick;
mod update;
mod usage;
mod writes;

/// Jobs handled at once in one batch of placements, run updates, creates or
/// kills: their writes share the store's group commits. A round's worth (the
/// engine takes up to 1,000 tasks), so that a round of one-task jobs (the pod
/// scheduler's pods) is not cut into waves that each wait for the store and
/// the hosts in turn (decision 0062).
pub(crate) const CONCURRENT_JOBS: usize = 1024;

/// Lifecycle calls run at once: the plugin runtime keeps a few warm
/// instances per version, and two cores gain nothing from more threads in
/// Wasm at a time.
pub(crate) const LIFECYCLE_CALLS_AT_ONCE: usize = 4;

use std::sync::{Arc, Mutex, MutexGuard};

use paceline_model::job::{JobConfig, JobRuntime, Update, UpdateSpec};
use paceline_model::task::TaskRuntime;
use paceline_plugin::Registry;
use paceline_resmgr::ResourceManager;
use paceline_storage::Store;

pub use pending::PendingReport;

use crate::state::Mem;
use paceline_joints::Clock;
use paceline_joints::Launcher;

/// Tunables.
#[derive(Clone, Debug)]
pub struct JobManagerConfig {
    /// Most instances one job may have in this cluster.
    pub max_instances: u32,
    /// How long a kill may go unconfirmed before it is sent again.
    pub kill_retry_ms: u64,
    /// Task events kept per `task_events` call.
    pub events_limit: u32,
    /// Jobs whose placements or run updates are handled at once (their
    /// writes share the store's group commits). 1 handles them one after
    /// another in job order: what a replay needs for its outcome not to
    /// depend on which store write or plugin call returns first.
    pub concurrent_jobs: usize,
}

impl Default for JobManagerConfig {
    fn default() -> Self {
        JobManagerConfig {
            max_instances: 100_000,
            kill_retry_ms: 30_000,
            events_limit: 100,
            concurrent_jobs: CONCURRENT_JOBS,
        }
    }
}

/// A job as [`JobManager::get`] returns it.
#[derive(Clone, Debug)]
pub struct JobInfo {
    /// Job id.
    pub id: String,
    /// The config instances should run (the desired version).
    pub config: Arc<JobConfig>,
    /// Its version.
    pub config_version: u64,
    /// The newest config version the job has.
    pub latest_config_version: u64,
    /// The runtime record.
    pub runtime: JobRuntime,
    /// Task runtimes by instance.
    pub tasks: Vec<TaskRuntime>,
    /// The latest update workflow, if any.
    pub update: Option<Update>,
}

/// Options of [`JobManager::update`]; `None` fields take the new config's `update` spec.
#[derive(Clone, Debug, Default)]
pub struct UpdateRequest {
    /// Overrides the config's update spec.
    pub spec: Option<UpdateSpec>,
}

/// The job manager. See the crate documentation.
pub struct JobManager {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) resmgr: Arc<Mutex<ResourceManager>>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) launcher: Arc<dyn Launcher>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: JobManagerConfig,
    pub(crate) ops: tokio::sync::Mutex<()>,
    /// API kills waiting for `ops`, handled together by whoever takes it
    /// (see `kills.rs`).
    pub(crate) kill_asks: Mutex<Vec<kills::KillAsk>>,
    /// Stored creates waiting for `ops`, entered and driven together by
    /// whoever takes it (see `creates.rs`).
    pub(crate) create_asks: Mutex<Vec<creates::CreateAsk>>,
    /// Bounds the lifecycle calls in flight (`LIFECYCLE_CALLS_AT_ONCE`).
    pub(crate) lifecycle_calls: tokio::sync::Semaphore,
    pub(crate) mem: Mutex<Mem>,
    pub(crate) feed: Arc<crate::feed::Feed>,
    /// Job events noted and not yet flushed (decision 0025).
    pub(crate) events: Arc<crate::events::EventRecorder>,
    /// When noted events were last flushed into the store.
    pub(crate) events_flushed_at: std::sync::atomic::AtomicU64,
    /// Held for writing by a flush (drain, store write, restore on failure)
    /// and for reading by an events read (store read, pending fold-in): a
    /// read between a flush's drain and its write would otherwise see the
    /// drained events in neither place.
    pub(crate) events_flush: tokio::sync::RwLock<()>,
    /// Submit→running latency of tasks' first runs.
    pub(crate) submit_to_running: crate::latency::LatencyHistogram,
    /// Opens task secrets at launch (decision 0032); `None`: jobs that
    /// reference secrets are refused.
    pub(crate) secret_key: Option<Arc<paceline_storage::secrets::SecretKey>>,
}

impl std::fmt::Debug for JobManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobManager")
            .field("store", &self.store.backend())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl JobManager {
    /// A job manager over `store`, submitting to `resmgr`, asking
    /// `registry`'s lifecycle slots (each has its kind's native fallback
    /// built in), launching through `launcher`. Call
    /// [`JobManager::recover`] before serving.
    pub fn new(
        store: Arc<dyn Store>,
        resmgr: Arc<Mutex<ResourceManager>>,
        registry: Arc<Registry>,
        launcher: Arc<dyn Launcher>,
        clock: Arc<dyn Clock>,
        config: JobManagerConfig,
    ) -> JobManager {
        JobManager {
            store,
            resmgr,
            registry,
            launcher,
            clock,
            config,
            ops: tokio::sync::Mutex::new(()),
            kill_asks: Mutex::new(Vec::new()),
            create_asks: Mutex::new(Vec::new()),
            lifecycle_calls: tokio::sync::Semaphore::new(LIFECYCLE_CALLS_AT_ONCE),
            feed: Arc::new(crate::feed::Feed::new()),
            mem: Mutex::new(Mem { next_key: 1, ..Mem::default() }),
            events: Arc::new(crate::events::EventRecorder::new()),
            events_flushed_at: std::sync::atomic::AtomicU64::new(0),
            events_flush: tokio::sync::RwLock::new(()),
            submit_to_running: crate::latency::LatencyHistogram::default(),
            secret_key: None,
        }
    }

    /// The key task secrets are sealed with, when this server has one.
    pub fn secret_key(&self) -> Option<&Arc<paceline_storage::secrets::SecretKey>> {
        self.secret_key.as_ref()
    }

    /// Opens the task secrets that job specs reference with `key`
    /// (decision 0032); without one, such jobs are refused.
    pub fn with_secret_key(mut self, key: Arc<paceline_storage::secrets::SecretKey>) -> JobManager {
        self.secret_key = Some(key);
        self
    }

    pub(crate) fn mem(&self) -> MutexGuard<'_, Mem> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn rm(&self) -> MutexGuard<'_, ResourceManager> {
        self.resmgr.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Submit→running latency so far: per task, its first run's first
    /// RUNNING minus its job's creation (tasks of the job's first config).
    pub fn submit_to_running(&self) -> crate::latency::LatencySnapshot {
        self.submit_to_running.snapshot()
    }

    /// The plugin registry the lifecycle slots are served from.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The change feed: every durable change of a job or task, with a revision.
    pub fn feed(&self) -> &Arc<crate::feed::Feed> {
        &self.feed
    }

    /// A task's runtime as the job manager holds it (no storage read).
    pub fn task_runtime(&self, job_id: &str, instance: u32) -> Option<TaskRuntime> {
        let m = self.mem();
        let job = m.jobs.get(&m.key_of(job_id)?)?;
        job.tasks.get(instance as usize).map(|t| t.rt.clone())
    }

    /// How many of a job's instances are unavailable now (not running, or
    /// not yet healthy) and how many may be (decision 0046); `None` for an
    /// unknown job. Every path that takes instances down asks against this count.
    pub fn availability(&self, job_id: &str) -> Option<crate::Availability> {
        let m = self.mem();
        let job = m.jobs.get(&m.key_of(job_id)?)?;
        Some(crate::availability::of(job))
    }

    /// A job's summary as the job manager holds it (no storage read); `None`
    /// for an unknown (or deleted) job.
    pub fn summary(&self, job_id: &str) -> Option<paceline_storage::JobSummary> {
        let m = self.mem();
        let job = m.jobs.get(&m.key_of(job_id)?)?;
        let latest = job.configs.get(&job.latest_version).unwrap_or_else(|| job.config());
        Some(paceline_storage::JobSummary {
            id: job.id.clone(),
            name: latest.name.clone(),
            owner: latest.owner.clone(),
            pool: latest.pool.clone(),
            kind: latest.kind,
            labels: latest.labels.clone(),
            instance_count: latest.instance_count,
            latest_config_version: job.latest_version,
            runtime: job.runtime.clone(),
        })
    }

    /// The earliest deadline queued, for a wiring that sleeps until then.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.mem().deadlines.next_at()
    }
}

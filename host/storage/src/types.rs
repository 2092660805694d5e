//! Records and queries the [`Store`](crate::Store) trait speaks in, besides
//! the model's own types, and the size limits every backend enforces.

use paceline_model::Labels;
use paceline_model::job::{JobConfig, JobKind, JobRuntime, JobState};
use paceline_model::task::{TaskRuntime, TaskState};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// Size limits, the same on every backend so that a cluster can move from
/// SQLite to Cassandra without data that one accepts and the other refuses.
pub mod limits {
    /// Longest id (job, update, host, pool path, plugin slot/name/version), bytes.
    pub const MAX_ID: usize = 512;
    /// Largest serialized job config, bytes (Cassandra warns on cells of a few MiB).
    pub const MAX_JOB_CONFIG: usize = 4 * 1024 * 1024;
    /// Largest serialized job or task runtime, update, event or host record, bytes.
    pub const MAX_RECORD: usize = 256 * 1024;
    /// Largest opaque pool spec, bytes.
    pub const MAX_POOL_SPEC: usize = 1024 * 1024;
    /// Largest plugin component, bytes (Python components run ~18 MB).
    pub const MAX_PLUGIN_BYTES: usize = 64 * 1024 * 1024;
    /// Most task events kept per task; older ones are dropped (SQLite) or
    /// expire by TTL and are never returned (Cassandra).
    pub const MAX_EVENTS_PER_TASK: usize = 100;
    /// Largest page a query returns.
    pub const MAX_PAGE: u32 = 10_000;
    /// Most job events (decision 0025) kept per job, the most recently seen;
    /// older ones are dropped on a later write and never returned.
    pub const MAX_EVENTS_PER_JOB: usize = 200;
    /// Job events not seen for this long before the job's newest are dropped
    /// (SQLite, memory) or expire by TTL (Cassandra): 7 days.
    pub const MAX_JOB_EVENT_AGE_MS: u64 = 7 * 24 * 3600 * 1000;
    /// Longest job event message, bytes.
    pub const MAX_EVENT_MESSAGE: usize = 4 * 1024;
}

/// A job as listed by [`Store::query_jobs`](crate::Store::query_jobs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    /// Job id.
    pub id: String,
    /// Name, from the latest config.
    pub name: String,
    /// Owner, from the latest config.
    pub owner: String,
    /// Pool path, from the latest config.
    pub pool: String,
    /// Kind, from the latest config.
    pub kind: JobKind,
    /// Labels, from the latest config.
    pub labels: Labels,
    /// Instance count of the latest config.
    pub instance_count: u32,
    /// Latest config version.
    pub latest_config_version: u64,
    /// The runtime record.
    pub runtime: JobRuntime,
}

/// Filters for [`Store::query_jobs`](crate::Store::query_jobs); empty
/// filters match everything. All given filters must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobQuery {
    /// Any of these states; empty for all.
    pub states: Vec<JobState>,
    /// Exact owner.
    pub owner: Option<String>,
    /// Exact pool path.
    pub pool: Option<String>,
    /// Every label here must be on the job with the same value.
    pub labels: Labels,
    /// Page size, 1..=[`limits::MAX_PAGE`].
    pub limit: u32,
    /// Cursor from the previous page's [`Page::next`]; `None` for the first page.
    pub cursor: Option<String>,
}

/// One page of results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Cursor of the next page; `None` when this is the last one. Opaque.
    pub next: Option<String>,
}

/// One compare-and-set write of a task runtime in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskCas {
    /// Instance number.
    pub instance: u32,
    /// Version the caller read; the write applies only if it is still current.
    pub expected_version: u64,
    /// The new runtime; its `version` field is ignored and set to `expected_version + 1`.
    pub runtime: TaskRuntime,
}

/// The instances whose write in a [`crate::Store::cas_tasks_with_events`]
/// call lost (`results` in the order of `writes`): their events are not
/// stored; every other event is. Empty, without allocating, when all won.
pub fn lost_instances(writes: &[TaskCas], results: &[Result<u64>]) -> std::collections::HashSet<u32> {
    writes.iter().zip(results).filter(|(_, r)| r.is_err()).map(|(w, _)| w.instance).collect()
}

/// A stored task runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRecord {
    /// Instance number.
    pub instance: u32,
    /// Its runtime, `version` as stored.
    pub runtime: TaskRuntime,
}

/// One deployed plugin version (without its bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginVersion {
    /// Slot, such as `placement/batch`.
    pub slot: String,
    /// Plugin name.
    pub name: String,
    /// Version string chosen by the deployer.
    pub version: String,
    /// SHA-256 of the component, lowercase hex.
    pub sha256: String,
    /// The WIT world it implements (`placement`, `preemption`, `lifecycle`).
    pub world: String,
    /// Deploy time, milliseconds since the epoch.
    pub deployed_at_ms: u64,
    /// State as the plugin registry names it (`ready`, `active`, `retired`, `failed`).
    pub state: String,
    /// Size of the component in bytes.
    pub size: u64,
}

impl PluginVersion {
    /// `name@version`, the version's id within its slot.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// Task states that are not terminal, for recovery queries.
pub fn live_task_states() -> Vec<TaskState> {
    TaskState::ALL.into_iter().filter(|s| !s.is_terminal()).collect()
}

/// Job states that are not terminal, for recovery queries.
pub fn live_job_states() -> Vec<JobState> {
    JobState::ALL.into_iter().filter(|s| !s.is_terminal()).collect()
}

pub(crate) fn check_id(kind: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(StoreError::Invalid(format!("{kind} id is empty")));
    }
    if id.len() > limits::MAX_ID {
        return Err(StoreError::TooLarge { what: format!("{kind} id"), size: id.len(), max: limits::MAX_ID });
    }
    if id.chars().any(char::is_control) {
        return Err(StoreError::Invalid(format!("{kind} id contains control characters")));
    }
    Ok(())
}

/// Serializes `value` to JSON, refusing anything over `max` bytes.
pub(crate) fn encode<T: Serialize>(what: impl Fn() -> String, value: &T, max: usize) -> Result<String> {
    let s = serde_json::to_string(value).map_err(|e| StoreError::Invalid(format!("{}: {e}", what())))?;
    if s.len() > max {
        return Err(StoreError::TooLarge { what: what(), size: s.len(), max });
    }
    Ok(s)
}

/// Decodes a stored JSON record.
pub(crate) fn decode<T: DeserializeOwned>(what: impl FnOnce() -> String, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt { what: what(), reason: e.to_string() })
}

/// Checks a job config for storing: valid, and small enough.
/// A job's summary columns as both backends store them: id, name, owner,
/// pool, kind, labels (JSON), instance count, latest config version, runtime (JSON).
pub(crate) type SummaryRow = (String, String, String, String, String, String, u32, u64, String);

/// Decodes a summary row.
pub(crate) fn to_summary(r: SummaryRow) -> Result<JobSummary> {
    let (id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime) = r;
    Ok(JobSummary {
        kind: decode(|| format!("kind of job {id}"), &format!("\"{kind}\""))?,
        labels: decode(|| format!("labels of job {id}"), &labels)?,
        runtime: decode(|| format!("runtime of job {id}"), &runtime)?,
        id,
        name,
        owner,
        pool,
        instance_count,
        latest_config_version,
    })
}

/// A new job checked and encoded for either backend: the config body, the
/// runtime at version 1 with its body, and the labels.
pub(crate) struct NewJob {
    pub(crate) config: String,
    pub(crate) runtime: JobRuntime,
    pub(crate) runtime_body: String,
    pub(crate) labels: String,
}

/// Validates and encodes a job about to be created, before any write.
pub(crate) fn new_job(id: &str, config: &JobConfig, runtime: &JobRuntime) -> Result<NewJob> {
    let body = encode_config(id, config)?;
    let mut rt = runtime.clone();
    rt.version = 1;
    rt.validate()?;
    let runtime_body = encode(|| format!("runtime of job {id}"), &rt, limits::MAX_RECORD)?;
    let labels = encode(|| format!("labels of job {id}"), &config.labels, limits::MAX_RECORD)?;
    Ok(NewJob { config: body, runtime: rt, runtime_body, labels })
}

pub(crate) fn encode_config(id: &str, config: &JobConfig) -> Result<String> {
    check_id("job", id)?;
    config.validate()?;
    encode(|| format!("config of job {id}"), config, limits::MAX_JOB_CONFIG)
}

pub(crate) fn check_page(limit: u32) -> Result<()> {
    if limit == 0 || limit > limits::MAX_PAGE {
        return Err(StoreError::Invalid(format!("page limit {limit} is not in 1..={}", limits::MAX_PAGE)));
    }
    Ok(())
}

/// Whether a job matches a query's filters (apart from paging).
pub(crate) fn matches(q: &JobQuery, s: &JobSummary) -> bool {
    (q.states.is_empty() || q.states.contains(&s.runtime.state))
        && q.owner.as_ref().is_none_or(|o| *o == s.owner)
        && q.pool.as_ref().is_none_or(|p| *p == s.pool)
        && q.labels.iter().all(|(k, v)| s.labels.get(k) == Some(v))
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

//! The store as the metrics see it: [`MeteredStore`] wraps any
//! [`Store`] and times every call by backend and operation, and counts the
//! calls that failed by the kind of error. Operations are the `Store`
//! trait's methods (a bounded set); one call is one observation, whether
//! it writes one task or a thousand, so the cost is per call, not per row.
//!
//! Conflicts, absent records and duplicates are answers the callers expect
//! (compare-and-set, lookups); they are counted by kind like the rest, and
//! the alert on store errors reads only the kinds that mean the store is
//! failing (`unavailable`, `backend`, `corrupt`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::secrets::SealedSecret;
use crate::snapshot::{WriteGate, WritePause};
use crate::{JobQuery, JobSummary, Page, PluginVersion, Result, Store, StoreError, TaskCas, TaskRecord};
use async_trait::async_trait;
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskSpec, TaskState};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

type OpLabels = [(&'static str, &'static str); 2];
type ErrorLabels = [(&'static str, &'static str); 3];

/// The store's figures: latency per (backend, operation), errors per
/// (backend, operation, kind), and records written per (backend,
/// operation). Cheap to clone (shared counters); a [`Collector`] so that a
/// server's metrics registry serves them.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    seconds: Family<OpLabels, Histogram>,
    errors: Family<ErrorLabels, Counter>,
    records: Family<OpLabels, Counter>,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            // 50 µs (an SQLite read from cache) to ~13 s (a Cassandra timeout).
            seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.00005, 4.0, 10))),
            errors: Family::default(),
            records: Family::default(),
        }
    }
}

impl StoreMetrics {
    /// Records `backend` ([`Store::backend`]) has written so far in
    /// successful write calls, per operation (what a scrape of
    /// `store_records_written` shows), in the operations' order.
    pub fn records_written(&self, backend: &'static str) -> Vec<(&'static str, u64)> {
        WRITE_OPS
            .iter()
            .filter_map(|&op| {
                let n = self.records.get(&[("backend", backend), ("op", op)]).map_or(0, |c| c.get());
                (n > 0).then_some((op, n))
            })
            .collect()
    }

    fn count_records(&self, backend: &'static str, op: &'static str, records: usize) {
        debug_assert!(WRITE_OPS.contains(&op), "{op} missing from metered::WRITE_OPS");
        if records > 0 {
            self.records.get_or_create(&[("backend", backend), ("op", op)]).inc_by(records as u64);
        }
    }

    fn record(&self, backend: &'static str, op: &'static str, took: std::time::Duration, error: Option<&StoreError>) {
        self.seconds.get_or_create(&[("backend", backend), ("op", op)]).observe(took.as_secs_f64());
        if let Some(e) = error {
            self.errors.get_or_create(&[("backend", backend), ("op", op), ("kind", error_kind(e))]).inc();
        }
    }
}

/// The write operations that count records, for [`StoreMetrics::records_written`].
const WRITE_OPS: [&str; 23] = [
    "add_job_config",
    "append_audit",
    "append_job_events",
    "append_task_events",
    "cas_job_runtime",
    "cas_task",
    "cas_tasks",
    "cas_update",
    "claim_leadership",
    "create_job",
    "create_job_with_tasks",
    "create_tasks",
    "create_update",
    "put_host",
    "put_plugin_version",
    "put_pool",
    "put_provider_id",
    "put_secret",
    "put_update_progress",
    "record_job_events",
    "set_active_plugin",
    "set_plugin_state",
    "set_slot_history",
];

/// A bounded name for an error.
fn error_kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::Conflict { .. } => "conflict",
        StoreError::NotFound { .. } => "not_found",
        StoreError::AlreadyExists { .. } => "already_exists",
        StoreError::TooLarge { .. } => "too_large",
        StoreError::Invalid(_) => "invalid",
        StoreError::SchemaTooNew { .. } => "schema_too_new",
        StoreError::Corrupt { .. } => "corrupt",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Backend(_) => "backend",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

impl Collector for StoreMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::result::Result<(), std::fmt::Error> {
        let seconds = encoder.encode_descriptor(
            "store_op_seconds",
            "Time of store calls by backend and operation",
            None,
            self.seconds.metric_type(),
        )?;
        self.seconds.encode(seconds)?;
        let errors = encoder.encode_descriptor(
            "store_op_errors",
            "Store calls that returned an error, by backend, operation and kind",
            None,
            self.errors.metric_type(),
        )?;
        self.errors.encode(errors)?;
        let records = encoder.encode_descriptor(
            "store_records_written",
            "Records written by successful store writes, by backend and operation: task runtimes for cas_tasks, \
             events for the event appends, one for a single-record write",
            None,
            self.records.metric_type(),
        )?;
        self.records.encode(records)
    }
}

/// A [`Store`] whose every call is timed into [`StoreMetrics`].
///
/// It is also the server's one way to its store, so it holds the gate that
/// a snapshot closes to pause the server's writes ([`Store::pause_writes`]):
/// every write waits for a permit, reads never do.
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    backend: &'static str,
    metrics: StoreMetrics,
    gate: WriteGate,
}

impl std::fmt::Debug for MeteredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredStore").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl MeteredStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>, metrics: StoreMetrics) -> MeteredStore {
        let backend = inner.backend();
        MeteredStore { inner, backend, metrics, gate: WriteGate::default() }
    }

    /// A write: timed, once the gate lets it through.
    async fn write<T>(&self, op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
        let _permit = self.gate.permit().await;
        self.timed(op, call).await
    }

    /// The task runtimes a batch of compare-and-sets wrote: those that won.
    fn count_cas_wins(&self, results: &[Result<u64>]) {
        self.metrics.count_records(self.backend, "cas_tasks", results.iter().filter(|r| r.is_ok()).count());
    }

    /// A write that stores `records` records when it succeeds.
    async fn write_records<T>(
        &self,
        op: &'static str,
        records: usize,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let out = self.write(op, call).await;
        if out.is_ok() {
            self.metrics.count_records(self.backend, op, records);
        }
        out
    }

    async fn timed<T>(&self, op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
        let started = Instant::now();
        let out = call.await;
        self.metrics.record(self.backend, op, started.elapsed(), out.as_ref().err());
        out
    }
}

// Every method forwards, the ones with a default body included, so that a
// backend's own version of them (one batch instead of a loop) is kept.
#[async_trait]
impl Store for MeteredStore {
    fn backend(&self) -> &'static str {
        self.backend
    }

    fn is_fenced(&self) -> bool {
        self.inner.is_fenced()
    }

    async fn consistent_view(&self) -> Result<Option<crate::snapshot::ConsistentView>> {
        self.timed("consistent_view", self.inner.consistent_view()).await
    }

    async fn pause_writes(&self) -> Option<WritePause> {
        Some(self.gate.pause().await)
    }

    async fn claim_leadership(&self, epoch: u64) -> Result<()> {
        self.write_records("claim_leadership", 1, self.inner.claim_leadership(epoch)).await
    }

    async fn create_job(&self, id: &str, config: &JobConfig, runtime: &JobRuntime) -> Result<JobRuntime> {
        self.write_records("create_job", 2, self.inner.create_job(id, config, runtime)).await
    }

    async fn create_job_with_tasks(
        &self,
        id: &str,
        config: &JobConfig,
        runtime: &JobRuntime,
        tasks: &[(u32, TaskRuntime)],
    ) -> Result<JobRuntime> {
        self.write_records(
            "create_job_with_tasks",
            2 + tasks.len(),
            self.inner.create_job_with_tasks(id, config, runtime, tasks),
        )
        .await
    }

    async fn remove_interrupted_creates(&self) -> Result<Vec<String>> {
        self.write("remove_interrupted_creates", self.inner.remove_interrupted_creates()).await
    }

    async fn add_job_config(&self, id: &str, version: u64, config: &JobConfig) -> Result<()> {
        self.write_records("add_job_config", 1, self.inner.add_job_config(id, version, config)).await
    }

    async fn get_job_config(&self, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)> {
        self.timed("get_job_config", self.inner.get_job_config(id, version)).await
    }

    async fn get_job_runtime(&self, id: &str) -> Result<JobRuntime> {
        self.timed("get_job_runtime", self.inner.get_job_runtime(id)).await
    }

    async fn cas_job_runtime(&self, id: &str, expected_version: u64, runtime: &JobRuntime) -> Result<JobRuntime> {
        self.write_records("cas_job_runtime", 1, self.inner.cas_job_runtime(id, expected_version, runtime)).await
    }

    async fn query_jobs(&self, query: &JobQuery) -> Result<Page<JobSummary>> {
        self.timed("query_jobs", self.inner.query_jobs(query)).await
    }

    async fn live_jobs(&self) -> Result<Vec<JobSummary>> {
        self.timed("live_jobs", self.inner.live_jobs()).await
    }

    async fn delete_job(&self, id: &str) -> Result<()> {
        self.write("delete_job", self.inner.delete_job(id)).await
    }

    async fn create_tasks(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        self.write_records("create_tasks", tasks.len(), self.inner.create_tasks(job_id, tasks)).await
    }

    async fn get_task(&self, job_id: &str, instance: u32) -> Result<TaskRuntime> {
        self.timed("get_task", self.inner.get_task(job_id, instance)).await
    }

    async fn cas_task(
        &self,
        job_id: &str,
        instance: u32,
        expected_version: u64,
        runtime: &TaskRuntime,
    ) -> Result<TaskRuntime> {
        self.write_records("cas_task", 1, self.inner.cas_task(job_id, instance, expected_version, runtime)).await
    }

    async fn cas_tasks(&self, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
        let out = self.write("cas_tasks", self.inner.cas_tasks(job_id, writes)).await;
        if let Ok(results) = &out {
            self.count_cas_wins(results);
        }
        out
    }

    async fn cas_tasks_with_events(
        &self,
        job_id: &str,
        writes: &[TaskCas],
        events: &[(u32, TaskEvent)],
    ) -> Result<Vec<Result<u64>>> {
        let out = self.write("cas_tasks_with_events", self.inner.cas_tasks_with_events(job_id, writes, events)).await;
        if let Ok(results) = &out {
            // Counted as the two calls it stands for would be.
            self.count_cas_wins(results);
            let lost = crate::types::lost_instances(writes, results);
            let kept = crate::event_rows::row_count(
                events.iter().filter(|(i, _)| !lost.contains(i)).map(|(i, e)| (*i, e.run)),
            );
            self.metrics.count_records(self.backend, "append_job_events", kept);
        }
        out
    }

    async fn tasks_of_job(&self, job_id: &str, states: &[TaskState]) -> Result<Vec<TaskRecord>> {
        self.timed("tasks_of_job", self.inner.tasks_of_job(job_id, states)).await
    }

    async fn task_spec(&self, job_id: &str, config_version: u64, instance: u32) -> Result<TaskSpec> {
        self.timed("task_spec", self.inner.task_spec(job_id, config_version, instance)).await
    }

    async fn append_task_events(&self, job_id: &str, instance: u32, events: &[TaskEvent]) -> Result<()> {
        let rows = crate::event_rows::row_count(events.iter().map(|e| (instance, e.run)));
        self.write_records("append_task_events", rows, self.inner.append_task_events(job_id, instance, events)).await
    }

    async fn append_job_events(&self, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
        let rows = crate::event_rows::row_count(events.iter().map(|(i, e)| (*i, e.run)));
        self.write_records("append_job_events", rows, self.inner.append_job_events(job_id, events)).await
    }

    async fn task_events(&self, job_id: &str, instance: u32, limit: u32) -> Result<Vec<TaskEvent>> {
        self.timed("task_events", self.inner.task_events(job_id, instance, limit)).await
    }

    async fn create_update(&self, update: &Update) -> Result<Update> {
        self.write_records("create_update", 1, self.inner.create_update(update)).await
    }

    async fn get_update(&self, id: &str) -> Result<Update> {
        self.timed("get_update", self.inner.get_update(id)).await
    }

    async fn cas_update(&self, id: &str, expected_version: u64, update: &Update) -> Result<Update> {
        self.write_records("cas_update", 1, self.inner.cas_update(id, expected_version, update)).await
    }

    async fn updates_of_job(&self, job_id: &str) -> Result<Vec<Update>> {
        self.timed("updates_of_job", self.inner.updates_of_job(job_id)).await
    }

    async fn put_update_progress(&self, update_id: &str, progress: &[InstanceProgress]) -> Result<()> {
        self.write_records("put_update_progress", progress.len(), self.inner.put_update_progress(update_id, progress))
            .await
    }

    async fn update_progress(&self, update_id: &str) -> Result<Vec<InstanceProgress>> {
        self.timed("update_progress", self.inner.update_progress(update_id)).await
    }

    async fn put_pool(&self, path: &str, spec: &[u8]) -> Result<()> {
        self.write_records("put_pool", 1, self.inner.put_pool(path, spec)).await
    }

    async fn get_pool(&self, path: &str) -> Result<Vec<u8>> {
        self.timed("get_pool", self.inner.get_pool(path)).await
    }

    async fn list_pools(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.timed("list_pools", self.inner.list_pools()).await
    }

    async fn delete_pool(&self, path: &str) -> Result<()> {
        self.write("delete_pool", self.inner.delete_pool(path)).await
    }

    async fn put_plugin_version(&self, version: &PluginVersion, bytes: &[u8]) -> Result<()> {
        self.write_records("put_plugin_version", 1, self.inner.put_plugin_version(version, bytes)).await
    }

    async fn set_plugin_state(&self, slot: &str, name: &str, version: &str, state: &str) -> Result<()> {
        self.write_records("set_plugin_state", 1, self.inner.set_plugin_state(slot, name, version, state)).await
    }

    async fn plugin_versions(&self, slot: Option<&str>) -> Result<Vec<PluginVersion>> {
        self.timed("plugin_versions", self.inner.plugin_versions(slot)).await
    }

    async fn plugin_bytes(&self, slot: &str, name: &str, version: &str) -> Result<Vec<u8>> {
        self.timed("plugin_bytes", self.inner.plugin_bytes(slot, name, version)).await
    }

    async fn set_slot_history(&self, slot: &str, history: &[String]) -> Result<()> {
        self.write_records("set_slot_history", 1, self.inner.set_slot_history(slot, history)).await
    }

    async fn slot_histories(&self) -> Result<BTreeMap<String, Vec<String>>> {
        self.timed("slot_histories", self.inner.slot_histories()).await
    }

    async fn active_plugin(&self, slot: &str) -> Result<Option<String>> {
        self.timed("active_plugin", self.inner.active_plugin(slot)).await
    }

    async fn set_active_plugin(&self, slot: &str, id: &str) -> Result<()> {
        self.write_records("set_active_plugin", 1, self.inner.set_active_plugin(slot, id)).await
    }

    async fn put_host(&self, host: &HostRecord) -> Result<()> {
        self.write_records("put_host", 1, self.inner.put_host(host)).await
    }

    async fn get_host(&self, hostname: &str) -> Result<HostRecord> {
        self.timed("get_host", self.inner.get_host(hostname)).await
    }

    async fn list_hosts(&self) -> Result<Vec<HostRecord>> {
        self.timed("list_hosts", self.inner.list_hosts()).await
    }

    async fn delete_host(&self, hostname: &str) -> Result<()> {
        self.write("delete_host", self.inner.delete_host(hostname)).await
    }

    async fn put_provider_id(&self, provider: &str, id: &str) -> Result<()> {
        self.write_records("put_provider_id", 1, self.inner.put_provider_id(provider, id)).await
    }

    async fn get_provider_id(&self, provider: &str) -> Result<Option<String>> {
        self.timed("get_provider_id", self.inner.get_provider_id(provider)).await
    }

    async fn record_job_events(&self, events: &[paceline_model::event::JobEvent]) -> Result<()> {
        self.write_records("record_job_events", events.len(), self.inner.record_job_events(events)).await
    }

    async fn job_events(
        &self,
        job_id: &str,
        instance: Option<u32>,
        limit: u32,
    ) -> Result<Vec<paceline_model::event::JobEvent>> {
        self.timed("job_events", self.inner.job_events(job_id, instance, limit)).await
    }

    async fn append_audit(&self, records: &[crate::AuditRecord]) -> Result<()> {
        self.write_records("append_audit", records.len(), self.inner.append_audit(records)).await
    }

    async fn query_audit(&self, query: &crate::AuditQuery) -> Result<Vec<crate::AuditRecord>> {
        self.timed("query_audit", self.inner.query_audit(query)).await
    }

    async fn prune_audit(&self, before_ms: u64, max_rows: u64) -> Result<u64> {
        self.write("prune_audit", self.inner.prune_audit(before_ms, max_rows)).await
    }

    async fn put_secret(&self, secret: &SealedSecret) -> Result<()> {
        self.write_records("put_secret", 1, self.inner.put_secret(secret)).await
    }

    async fn get_secret(&self, pool: &str, name: &str) -> Result<SealedSecret> {
        self.timed("get_secret", self.inner.get_secret(pool, name)).await
    }

    async fn list_secrets(&self, pool: &str) -> Result<Vec<SealedSecret>> {
        self.timed("list_secrets", self.inner.list_secrets(pool)).await
    }

    async fn delete_secret(&self, pool: &str, name: &str) -> Result<()> {
        self.write("delete_secret", self.inner.delete_secret(pool, name)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use paceline_model::job::JobKind;

    fn job(instances: u32) -> JobConfig {
        JobConfig {
            name: "web".into(),
            owner: "alice".into(),
            pool: "/prod".into(),
            kind: JobKind::Batch,
            instance_count: instances,
            default_task: TaskSpec { command: "run".into(), ..TaskSpec::default() },
            ..JobConfig::default()
        }
    }

    /// Each successful write counts the records it wrote; a compare-and-set
    /// that lost counts none, and a refused call counts nothing. The same
    /// figures reach a scrape as `store_records_written`.
    #[tokio::test]
    async fn records_written_count_what_each_successful_write_stored() {
        let metrics = StoreMetrics::default();
        let store = MeteredStore::new(Arc::new(MemoryStore::new()), metrics.clone());
        let tasks: Vec<(u32, TaskRuntime)> = (0..3).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
        store.create_job_with_tasks("j", &job(3), &JobRuntime::initial(1, 0), &tasks).await.expect("create");
        // The same id again is refused: nothing more is counted.
        assert!(store.create_job_with_tasks("j", &job(3), &JobRuntime::initial(1, 0), &tasks).await.is_err());
        let mut running = TaskRuntime::initial(1, 0);
        running.state = TaskState::Running;
        let writes = [
            TaskCas { instance: 0, expected_version: 1, runtime: running.clone() },
            TaskCas { instance: 1, expected_version: 7, runtime: running.clone() },
            TaskCas { instance: 2, expected_version: 1, runtime: running },
        ];
        let results = store.cas_tasks("j", &writes).await.expect("batch");
        assert!(results[1].as_ref().is_err_and(StoreError::is_conflict));
        assert_eq!(metrics.records_written("memory"), vec![("cas_tasks", 2), ("create_job_with_tasks", 5)]);

        // Task writes with their events in one call count as the two calls
        // it stands for; the event of a write that lost is not stored.
        let mut done = TaskRuntime::initial(1, 0);
        done.state = TaskState::Succeeded;
        let writes = [
            TaskCas { instance: 0, expected_version: 2, runtime: done.clone() },
            TaskCas { instance: 1, expected_version: 7, runtime: done },
        ];
        let event = |i: u32| {
            (
                i,
                TaskEvent {
                    run: 1,
                    from: Some(TaskState::Running),
                    to: TaskState::Succeeded,
                    at_ms: 5,
                    host: None,
                    reason: "EXITED".into(),
                    message: String::new(),
                },
            )
        };
        let results = store.cas_tasks_with_events("j", &writes, &[event(0), event(1)]).await.expect("batch");
        assert!(results[0].is_ok() && results[1].as_ref().is_err_and(StoreError::is_conflict), "{results:?}");
        assert_eq!(
            metrics.records_written("memory"),
            vec![("append_job_events", 1), ("cas_tasks", 3), ("create_job_with_tasks", 5)]
        );
        // A call's events are stored a row per run of a task (decision
        // 0072): two events of instance 0's run 1 and one of instance 1's
        // are two rows.
        store.append_job_events("j", &[event(0), event(1), event(0)]).await.expect("events");
        assert_eq!(
            metrics.records_written("memory"),
            vec![("append_job_events", 3), ("cas_tasks", 3), ("create_job_with_tasks", 5)]
        );
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(metrics));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("store_records_written_total{backend=\"memory\",op=\"cas_tasks\"} 3"), "{text}");
    }
}

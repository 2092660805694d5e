//! The in-memory backend: every record in ordered maps behind one mutex.
//! **Not durable**: it is the simulator's store (`paceline sim`), where a
//! replay needs the roles' real compare-and-set semantics without a disk,
//! a writer thread or a wait, and where an answer must not depend on when
//! another thread runs. It passes the same conformance suite as SQLite and
//! Cassandra; no server configuration can select it.
//!
//! Each call completes before it returns to the executor (no thread hop),
//! so the order of a caller's writes is the order of its calls.
//!
//! [`MemoryStore::take_events`] hands the task events appended so far to
//! their one reader (the simulator builds its report from them) and
//! forgets them, so a replay of a million tasks does not keep their
//! history twice.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use paceline_model::event::JobEvent;
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};

use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{
    JobQuery, JobSummary, Page, PluginVersion, TaskCas, TaskRecord, check_id, check_page, encode, encode_config,
    limits, matches,
};
use crate::validate;

#[derive(Debug)]
struct Job {
    configs: BTreeMap<u64, JobConfig>,
    runtime: JobRuntime,
    tasks: BTreeMap<u32, TaskRuntime>,
}

/// Per instance: (at, run, to) → event, keyed as SQLite keys them.
type Events = BTreeMap<u32, BTreeMap<(u64, u64, &'static str), TaskEvent>>;

#[derive(Debug, Default)]
struct Data {
    jobs: BTreeMap<String, Job>,
    /// Task events by job (events may name a job before or after it exists, as in SQLite).
    events: BTreeMap<String, Events>,
    updates: BTreeMap<String, Update>,
    progress: BTreeMap<String, BTreeMap<u32, InstanceProgress>>,
    pools: BTreeMap<String, Vec<u8>>,
    plugins: BTreeMap<(String, String, String), (PluginVersion, Vec<u8>)>,
    slots: BTreeMap<String, Vec<String>>,
    hosts: BTreeMap<String, HostRecord>,
    provider_ids: BTreeMap<String, String>,
    epoch: u64,
    /// Appended events not yet taken, in append order.
    log: Vec<(String, u32, TaskEvent)>,
    /// Job events (decision 0025) by job, retained as the rules say.
    job_events: BTreeMap<String, Vec<JobEvent>>,
    /// The audit log by append order (the key only grows), with each id's key.
    audit: BTreeMap<u64, crate::AuditRecord>,
    audit_ids: std::collections::HashMap<String, u64>,
    audit_next: u64,
    /// Sealed task secrets by (pool, name).
    secrets: BTreeMap<(String, String), crate::secrets::SealedSecret>,
}

/// The in-memory store. See the module docs: not durable.
#[derive(Debug, Default)]
pub struct MemoryStore {
    data: Mutex<Data>,
    fence: crate::fence::Fence,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn data(&self) -> MutexGuard<'_, Data> {
        // Plain data: a panic elsewhere leaves it consistent enough to read.
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> Result<MutexGuard<'_, Data>> {
        let d = self.data();
        self.fence.check(d.epoch)?;
        Ok(d)
    }

    /// Every task event appended since the last call, in append order, as
    /// (job id, instance, event); they are forgotten here (and no longer
    /// returned by [`Store::task_events`]).
    pub fn take_events(&self) -> Vec<(String, u32, TaskEvent)> {
        let mut d = self.data();
        let log = std::mem::take(&mut d.log);
        for (job, instance, e) in &log {
            if let Some(evs) = d.events.get_mut(job).and_then(|j| j.get_mut(instance)) {
                evs.remove(&(e.at_ms, e.run, e.to.as_str()));
            }
        }
        log
    }
}

fn summary(id: &str, j: &Job) -> JobSummary {
    let (version, latest) = j.configs.iter().next_back().map(|(v, c)| (*v, c.clone())).unwrap_or_default();
    JobSummary {
        id: id.to_string(),
        name: latest.name,
        owner: latest.owner,
        pool: latest.pool,
        kind: latest.kind,
        labels: latest.labels,
        instance_count: latest.instance_count,
        latest_config_version: version,
        runtime: j.runtime.clone(),
    }
}

fn check_task(instance: u32, rt: &TaskRuntime) -> Result<()> {
    validate::instance(instance)?;
    rt.validate()?;
    Ok(())
}

fn cas_in(job_id: &str, job: &mut Job, instance: u32, expected: u64, runtime: &TaskRuntime) -> Result<u64> {
    let stored =
        job.tasks.get_mut(&instance).ok_or_else(|| StoreError::not_found("task", format!("{job_id}/{instance}")))?;
    if stored.version != expected {
        return Err(StoreError::conflict(format!("task {job_id}/{instance}"), expected, Some(stored.version)));
    }
    *stored = runtime.clone();
    stored.version = expected + 1;
    Ok(expected + 1)
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn claim_leadership(&self, epoch: u64) -> Result<()> {
        if epoch == 0 {
            return Err(StoreError::Invalid("leader epoch 0: epochs start at 1".into()));
        }
        let mut d = self.data();
        if d.epoch > epoch {
            return Err(StoreError::Fenced { mine: epoch, current: d.epoch });
        }
        d.epoch = epoch;
        self.fence.set_claimed(epoch);
        Ok(())
    }

    fn is_fenced(&self) -> bool {
        self.fence.is_fenced()
    }

    async fn create_job(&self, id: &str, config: &JobConfig, runtime: &JobRuntime) -> Result<JobRuntime> {
        self.create_job_with_tasks(id, config, runtime, &[]).await
    }

    async fn create_job_with_tasks(
        &self,
        id: &str,
        config: &JobConfig,
        runtime: &JobRuntime,
        tasks: &[(u32, TaskRuntime)],
    ) -> Result<JobRuntime> {
        encode_config(id, config)?;
        let mut rt = runtime.clone();
        rt.version = 1;
        rt.validate()?;
        encode(|| format!("runtime of job {id}"), &rt, limits::MAX_RECORD)?;
        let mut seen = std::collections::BTreeSet::new();
        for (instance, task) in tasks {
            check_task(*instance, task)?;
            if !seen.insert(*instance) {
                return Err(StoreError::exists("task", format!("{id}/{instance}")));
            }
        }
        // One lock for the job and its tasks: all or nothing.
        let mut d = self.write()?;
        if d.jobs.contains_key(id) {
            return Err(StoreError::exists("job", id));
        }
        let mut job = Job { configs: BTreeMap::new(), runtime: rt.clone(), tasks: BTreeMap::new() };
        job.configs.insert(1, config.clone());
        for (instance, task) in tasks {
            let mut task = task.clone();
            task.version = 1;
            job.tasks.insert(*instance, task);
        }
        d.jobs.insert(id.to_string(), job);
        Ok(rt)
    }

    async fn add_job_config(&self, id: &str, version: u64, config: &JobConfig) -> Result<()> {
        encode_config(id, config)?;
        let mut d = self.write()?;
        let job = d.jobs.get_mut(id).ok_or_else(|| StoreError::not_found("job", id))?;
        let latest = job.configs.keys().next_back().copied().unwrap_or(0);
        if version != latest + 1 {
            return Err(StoreError::conflict(format!("config of job {id}"), version.saturating_sub(1), Some(latest)));
        }
        job.configs.insert(version, config.clone());
        Ok(())
    }

    async fn get_job_config(&self, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)> {
        let d = self.data();
        let job = d.jobs.get(id);
        let found = match version {
            Some(v) => job.and_then(|j| j.configs.get(&v).map(|c| (v, c.clone()))),
            None => job.and_then(|j| j.configs.iter().next_back().map(|(v, c)| (*v, c.clone()))),
        };
        found.ok_or_else(|| {
            StoreError::not_found(
                "job config",
                match version {
                    Some(v) => format!("{id} v{v}"),
                    None => id.to_string(),
                },
            )
        })
    }

    async fn get_job_runtime(&self, id: &str) -> Result<JobRuntime> {
        self.data().jobs.get(id).map(|j| j.runtime.clone()).ok_or_else(|| StoreError::not_found("job", id))
    }

    async fn cas_job_runtime(&self, id: &str, expected_version: u64, runtime: &JobRuntime) -> Result<JobRuntime> {
        check_id("job", id)?;
        runtime.validate()?;
        let mut d = self.write()?;
        let job = d.jobs.get_mut(id).ok_or_else(|| StoreError::not_found("job", id))?;
        if job.runtime.version != expected_version {
            return Err(StoreError::conflict(format!("job {id}"), expected_version, Some(job.runtime.version)));
        }
        let mut stored = runtime.clone();
        stored.version = expected_version + 1;
        job.runtime = stored.clone();
        Ok(stored)
    }

    async fn query_jobs(&self, query: &JobQuery) -> Result<Page<JobSummary>> {
        check_page(query.limit)?;
        let d = self.data();
        let after = query.cursor.clone().unwrap_or_default();
        let mut items = Vec::new();
        let mut next = None;
        for (id, j) in d.jobs.range::<String, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)) {
            let s = summary(id, j);
            if !matches(query, &s) {
                continue;
            }
            if items.len() == query.limit as usize {
                next = items.last().map(|s: &JobSummary| s.id.clone());
                break;
            }
            items.push(s);
        }
        Ok(Page { items, next })
    }

    async fn live_jobs(&self) -> Result<Vec<JobSummary>> {
        let d = self.data();
        Ok(d.jobs.iter().filter(|(_, j)| !j.runtime.state.is_terminal()).map(|(id, j)| summary(id, j)).collect())
    }

    async fn delete_job(&self, id: &str) -> Result<()> {
        let mut d = self.write()?;
        if d.jobs.remove(id).is_none() {
            return Err(StoreError::not_found("job", id));
        }
        d.events.remove(id);
        d.job_events.remove(id);
        d.log.retain(|(j, _, _)| j != id);
        Ok(())
    }

    async fn create_tasks(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        check_id("job", job_id)?;
        for (instance, rt) in tasks {
            check_task(*instance, rt)?;
        }
        let mut d = self.write()?;
        let job = d.jobs.get_mut(job_id).ok_or_else(|| StoreError::not_found("job", job_id))?;
        if let Some((i, _)) = tasks.iter().find(|(i, _)| job.tasks.contains_key(i)) {
            return Err(StoreError::exists("task", format!("{job_id}/{i}")));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some((i, _)) = tasks.iter().find(|(i, _)| !seen.insert(*i)) {
            return Err(StoreError::exists("task", format!("{job_id}/{i}")));
        }
        for (instance, rt) in tasks {
            let mut rt = rt.clone();
            rt.version = 1;
            job.tasks.insert(*instance, rt);
        }
        Ok(())
    }

    async fn get_task(&self, job_id: &str, instance: u32) -> Result<TaskRuntime> {
        self.data()
            .jobs
            .get(job_id)
            .and_then(|j| j.tasks.get(&instance).cloned())
            .ok_or_else(|| StoreError::not_found("task", format!("{job_id}/{instance}")))
    }

    async fn cas_task(
        &self,
        job_id: &str,
        instance: u32,
        expected_version: u64,
        runtime: &TaskRuntime,
    ) -> Result<TaskRuntime> {
        check_id("job", job_id)?;
        check_task(instance, runtime)?;
        let mut d = self.write()?;
        let job =
            d.jobs.get_mut(job_id).ok_or_else(|| StoreError::not_found("task", format!("{job_id}/{instance}")))?;
        let version = cas_in(job_id, job, instance, expected_version, runtime)?;
        let mut out = runtime.clone();
        out.version = version;
        Ok(out)
    }

    async fn cas_tasks(&self, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
        check_id("job", job_id)?;
        for w in writes {
            check_task(w.instance, &w.runtime)?;
        }
        let mut d = self.write()?;
        let Some(job) = d.jobs.get_mut(job_id) else {
            return Ok(writes
                .iter()
                .map(|w| Err(StoreError::not_found("task", format!("{job_id}/{}", w.instance))))
                .collect());
        };
        Ok(writes.iter().map(|w| cas_in(job_id, job, w.instance, w.expected_version, &w.runtime)).collect())
    }

    async fn tasks_of_job(&self, job_id: &str, states: &[TaskState]) -> Result<Vec<TaskRecord>> {
        let d = self.data();
        Ok(d.jobs
            .get(job_id)
            .map(|j| {
                j.tasks
                    .iter()
                    .filter(|(_, rt)| states.is_empty() || states.contains(&rt.state))
                    .map(|(i, rt)| TaskRecord { instance: *i, runtime: rt.clone() })
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn append_task_events(&self, job_id: &str, instance: u32, events: &[TaskEvent]) -> Result<()> {
        let events: Vec<(u32, TaskEvent)> = events.iter().map(|e| (instance, e.clone())).collect();
        self.append_job_events(job_id, &events).await
    }

    async fn append_job_events(&self, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
        check_id("job", job_id)?;
        if events.is_empty() {
            return Ok(());
        }
        for (instance, e) in events {
            validate::instance(*instance)?;
            if e.message.len() > limits::MAX_RECORD || e.reason.len() > limits::MAX_RECORD {
                return Err(StoreError::TooLarge {
                    what: format!("event of task {job_id}/{instance}"),
                    size: e.message.len().max(e.reason.len()),
                    max: limits::MAX_RECORD,
                });
            }
        }
        let mut d = self.write()?;
        let Data { events: all, log, .. } = &mut *d;
        let job = all.entry(job_id.to_string()).or_default();
        for (instance, e) in events {
            let evs = job.entry(*instance).or_default();
            evs.insert((e.at_ms, e.run, e.to.as_str()), e.clone());
            while evs.len() > limits::MAX_EVENTS_PER_TASK {
                evs.pop_first();
            }
            log.push((job_id.to_string(), *instance, e.clone()));
        }
        Ok(())
    }

    async fn task_events(&self, job_id: &str, instance: u32, limit: u32) -> Result<Vec<TaskEvent>> {
        check_page(limit)?;
        let d = self.data();
        let limit = (limit as usize).min(limits::MAX_EVENTS_PER_TASK);
        Ok(d.events
            .get(job_id)
            .and_then(|j| j.get(&instance))
            .map(|evs| evs.values().rev().take(limit).cloned().collect())
            .unwrap_or_default())
    }

    async fn create_update(&self, update: &Update) -> Result<Update> {
        update.validate()?;
        check_id("update", &update.id)?;
        let mut stored = update.clone();
        stored.version = 1;
        encode(|| format!("update {}", update.id), &stored, limits::MAX_JOB_CONFIG)?;
        let mut d = self.write()?;
        if !d.jobs.contains_key(&stored.job_id) {
            return Err(StoreError::not_found("job", &stored.job_id));
        }
        if d.updates.contains_key(&stored.id) {
            return Err(StoreError::exists("update", &stored.id));
        }
        d.updates.insert(stored.id.clone(), stored.clone());
        Ok(stored)
    }

    async fn get_update(&self, id: &str) -> Result<Update> {
        self.data().updates.get(id).cloned().ok_or_else(|| StoreError::not_found("update", id))
    }

    async fn cas_update(&self, id: &str, expected_version: u64, update: &Update) -> Result<Update> {
        update.validate()?;
        if update.id != id {
            return Err(StoreError::Invalid(format!("update id `{}` differs from `{id}`", update.id)));
        }
        let mut stored = update.clone();
        stored.version = expected_version + 1;
        encode(|| format!("update {id}"), &stored, limits::MAX_JOB_CONFIG)?;
        let mut d = self.write()?;
        let current = d.updates.get_mut(id).ok_or_else(|| StoreError::not_found("update", id))?;
        if current.version != expected_version {
            return Err(StoreError::conflict(format!("update {id}"), expected_version, Some(current.version)));
        }
        *current = stored.clone();
        Ok(stored)
    }

    async fn updates_of_job(&self, job_id: &str) -> Result<Vec<Update>> {
        let d = self.data();
        let mut out: Vec<Update> = d.updates.values().filter(|u| u.job_id == job_id).cloned().collect();
        out.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        Ok(out)
    }

    async fn put_update_progress(&self, update_id: &str, progress: &[InstanceProgress]) -> Result<()> {
        check_id("update", update_id)?;
        for p in progress {
            encode(|| format!("progress of update {update_id}"), p, limits::MAX_RECORD)?;
        }
        let mut d = self.write()?;
        if !d.updates.contains_key(update_id) {
            return Err(StoreError::not_found("update", update_id));
        }
        let rows = d.progress.entry(update_id.to_string()).or_default();
        for p in progress {
            rows.insert(p.instance, p.clone());
        }
        Ok(())
    }

    async fn update_progress(&self, update_id: &str) -> Result<Vec<InstanceProgress>> {
        Ok(self.data().progress.get(update_id).map(|m| m.values().cloned().collect()).unwrap_or_default())
    }

    async fn put_pool(&self, path: &str, spec: &[u8]) -> Result<()> {
        validate::pool(path, spec)?;
        self.write()?.pools.insert(path.to_string(), spec.to_vec());
        Ok(())
    }

    async fn get_pool(&self, path: &str) -> Result<Vec<u8>> {
        self.data().pools.get(path).cloned().ok_or_else(|| StoreError::not_found("pool", path))
    }

    async fn list_pools(&self) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self.data().pools.iter().map(|(p, s)| (p.clone(), s.clone())).collect())
    }

    async fn delete_pool(&self, path: &str) -> Result<()> {
        self.write()?.pools.remove(path);
        Ok(())
    }

    async fn put_plugin_version(&self, version: &PluginVersion, bytes: &[u8]) -> Result<()> {
        validate::plugin(version, bytes)?;
        let mut d = self.write()?;
        let key = (version.slot.clone(), version.name.clone(), version.version.clone());
        if d.plugins.contains_key(&key) {
            return Err(StoreError::exists("plugin version", format!("{}/{}", version.slot, version.id())));
        }
        d.plugins.insert(key, (version.clone(), bytes.to_vec()));
        Ok(())
    }

    async fn set_plugin_state(&self, slot: &str, name: &str, version: &str, state: &str) -> Result<()> {
        check_id("plugin state", state)?;
        let mut d = self.write()?;
        let key = (slot.to_string(), name.to_string(), version.to_string());
        let (v, _) = d
            .plugins
            .get_mut(&key)
            .ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))?;
        v.state = state.to_string();
        Ok(())
    }

    async fn plugin_versions(&self, slot: Option<&str>) -> Result<Vec<PluginVersion>> {
        let d = self.data();
        let mut out: Vec<PluginVersion> =
            d.plugins.values().filter(|(v, _)| slot.is_none_or(|s| s == v.slot)).map(|(v, _)| v.clone()).collect();
        out.sort_by(|a, b| {
            (&a.slot, a.deployed_at_ms, &a.name, &a.version).cmp(&(&b.slot, b.deployed_at_ms, &b.name, &b.version))
        });
        Ok(out)
    }

    async fn plugin_bytes(&self, slot: &str, name: &str, version: &str) -> Result<Vec<u8>> {
        let key = (slot.to_string(), name.to_string(), version.to_string());
        self.data()
            .plugins
            .get(&key)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))
    }

    async fn set_slot_history(&self, slot: &str, history: &[String]) -> Result<()> {
        check_id("plugin slot", slot)?;
        encode(|| format!("history of slot {slot}"), &history, limits::MAX_RECORD)?;
        self.write()?.slots.insert(slot.to_string(), history.to_vec());
        Ok(())
    }

    async fn slot_histories(&self) -> Result<BTreeMap<String, Vec<String>>> {
        Ok(self.data().slots.clone())
    }

    async fn put_host(&self, host: &HostRecord) -> Result<()> {
        validate::host(host)?;
        encode(|| format!("host {}", host.hostname), host, limits::MAX_RECORD)?;
        self.write()?.hosts.insert(host.hostname.clone(), host.clone());
        Ok(())
    }

    async fn get_host(&self, hostname: &str) -> Result<HostRecord> {
        self.data().hosts.get(hostname).cloned().ok_or_else(|| StoreError::not_found("host", hostname))
    }

    async fn list_hosts(&self) -> Result<Vec<HostRecord>> {
        Ok(self.data().hosts.values().cloned().collect())
    }

    async fn delete_host(&self, hostname: &str) -> Result<()> {
        self.write()?.hosts.remove(hostname);
        Ok(())
    }

    async fn put_provider_id(&self, provider: &str, id: &str) -> Result<()> {
        check_id("provider", provider)?;
        check_id("provider id", id)?;
        self.write()?.provider_ids.insert(provider.to_string(), id.to_string());
        Ok(())
    }

    async fn get_provider_id(&self, provider: &str) -> Result<Option<String>> {
        Ok(self.data().provider_ids.get(provider).cloned())
    }

    async fn record_job_events(&self, events: &[JobEvent]) -> Result<()> {
        crate::job_events::check(events)?;
        let mut d = self.write()?;
        for e in crate::job_events::fold(events) {
            let stored = d.job_events.entry(e.job_id.clone()).or_default();
            match stored.iter_mut().find(|s| s.same_as(&e)) {
                Some(s) => s.absorb(&e),
                None => stored.push(e),
            }
        }
        for job in events.iter().map(|e| e.job_id.as_str()).collect::<std::collections::BTreeSet<_>>() {
            if let Some(stored) = d.job_events.get_mut(job) {
                *stored = crate::job_events::retain(std::mem::take(stored));
            }
        }
        Ok(())
    }

    async fn append_audit(&self, records: &[crate::AuditRecord]) -> Result<()> {
        crate::audit::check_records(records)?;
        let mut d = self.write()?;
        for r in records {
            if d.audit_ids.contains_key(&r.id) {
                continue;
            }
            let seq = d.audit_next;
            d.audit_next += 1;
            d.audit_ids.insert(r.id.clone(), seq);
            d.audit.insert(seq, r.clone());
        }
        Ok(())
    }

    async fn job_events(&self, job_id: &str, instance: Option<u32>, limit: u32) -> Result<Vec<JobEvent>> {
        check_id("job", job_id)?;
        check_page(limit)?;
        let stored = self.data().job_events.get(job_id).cloned().unwrap_or_default();
        Ok(crate::job_events::select(stored, instance, limit))
    }

    async fn query_audit(&self, query: &crate::AuditQuery) -> Result<Vec<crate::AuditRecord>> {
        let d = self.data();
        let mut found: Vec<crate::AuditRecord> = d.audit.values().filter(|r| query.matches(r)).cloned().collect();
        found.sort_by(crate::audit::newest_first);
        found.truncate(query.limit());
        Ok(found)
    }

    async fn prune_audit(&self, before_ms: u64, max_rows: u64) -> Result<u64> {
        let mut d = self.write()?;
        let old: Vec<u64> = d.audit.iter().filter(|(_, r)| r.at_ms < before_ms).map(|(k, _)| *k).collect();
        let excess = (d.audit.len() - old.len()).saturating_sub(max_rows.min(usize::MAX as u64) as usize);
        let oldest: Vec<u64> =
            d.audit.iter().filter(|(_, r)| r.at_ms >= before_ms).take(excess).map(|(k, _)| *k).collect();
        let mut gone = 0;
        for k in old.into_iter().chain(oldest) {
            if let Some(r) = d.audit.remove(&k) {
                d.audit_ids.remove(&r.id);
                gone += 1;
            }
        }
        Ok(gone)
    }

    async fn put_secret(&self, secret: &crate::secrets::SealedSecret) -> Result<()> {
        validate::secret(secret)?;
        self.write()?.secrets.insert((secret.pool.clone(), secret.name.clone()), secret.clone());
        Ok(())
    }

    async fn get_secret(&self, pool: &str, name: &str) -> Result<crate::secrets::SealedSecret> {
        self.data()
            .secrets
            .get(&(pool.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| StoreError::not_found("secret", format!("{pool}/{name}")))
    }

    async fn list_secrets(&self, pool: &str) -> Result<Vec<crate::secrets::SealedSecret>> {
        Ok(self.data().secrets.values().filter(|s| s.pool == pool).cloned().collect())
    }

    async fn delete_secret(&self, pool: &str, name: &str) -> Result<()> {
        self.write()?.secrets.remove(&(pool.to_string(), name.to_string()));
        Ok(())
    }
}

//! The handle's cache of task runtime versions (decision 0049): where the
//! compare-and-set of task runtimes checks the version it is given, instead
//! of a Paxos round in the database. Filled a bucket (partition) at a time
//! from the database on first use, kept up to date by the handle's own
//! writes; a write whose outcome is unknown forgets what it touched, so the
//! next one reads the database again.
//!
//! Exact for one writing handle, which the fence makes of the leader. Its
//! size: a few tens of bytes per task this handle has written or checked;
//! a job's entries go when the job is deleted.
//!
//! The same for job rows ([`JobVersions`]): "already exists" for a create,
//! the runtime's version and the latest config version, about a hundred
//! bytes per job this handle has created or written.

use std::collections::HashMap;
use std::sync::Mutex;

use super::bucket;
use crate::error::{Result, StoreError};

#[derive(Debug, Default)]
struct Bucket {
    /// Every task row of the bucket is in `versions` (it was read whole).
    complete: bool,
    versions: HashMap<u32, u64>,
}

/// Versions by job, then bucket, then instance.
#[derive(Debug, Default)]
pub(super) struct Versions {
    jobs: Mutex<HashMap<String, HashMap<i32, Bucket>>>,
}

impl Versions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<i32, Bucket>>> {
        // A panic while holding it leaves plain data, still consistent.
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The buckets (distinct, ascending) that must be read before `instances`
    /// can be checked: those not read whole where the instance is unknown.
    pub(super) fn missing_buckets(&self, job_id: &str, instances: impl Iterator<Item = u32>) -> Vec<i32> {
        let jobs = self.lock();
        let job = jobs.get(job_id);
        let mut out: Vec<i32> = instances
            .filter(|&i| {
                job.and_then(|j| j.get(&bucket(i))).is_none_or(|b| !b.complete && !b.versions.contains_key(&i))
            })
            .map(bucket)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// A bucket as read from the database: every row it has. Versions this
    /// handle knows already stay (they come from its own later writes).
    pub(super) fn fill(&self, job_id: &str, b: i32, rows: impl Iterator<Item = (u32, u64)>) {
        let mut jobs = self.lock();
        let entry = jobs.entry(job_id.to_string()).or_default().entry(b).or_default();
        for (i, v) in rows {
            entry.versions.entry(i).or_insert(v);
        }
        entry.complete = true;
    }

    /// Checks that `instance` is at `expected` and takes `expected + 1` for
    /// it. [`StoreError::Conflict`] with the version found, or
    /// [`StoreError::NotFound`] when its bucket was read and has no such
    /// task; a conflict without a version when it is not known (a failed
    /// write made this handle forget it after it was read).
    pub(super) fn take(&self, job_id: &str, instance: u32, expected: u64) -> Result<()> {
        let what = || format!("task {job_id}/{instance}");
        let mut jobs = self.lock();
        let Some(b) = jobs.get_mut(job_id).and_then(|j| j.get_mut(&bucket(instance))) else {
            return Err(StoreError::conflict(what(), expected, None));
        };
        match b.versions.get_mut(&instance) {
            Some(v) if *v == expected => {
                *v = expected + 1;
                Ok(())
            }
            Some(v) => Err(StoreError::conflict(what(), expected, Some(*v))),
            None if b.complete => Err(StoreError::not_found("task", format!("{job_id}/{instance}"))),
            None => Err(StoreError::conflict(what(), expected, None)),
        }
    }

    /// Versions this handle has just written.
    pub(super) fn set(&self, job_id: &str, versions: &[(u32, u64)]) {
        let mut jobs = self.lock();
        let job = jobs.entry(job_id.to_string()).or_default();
        for &(i, v) in versions {
            job.entry(bucket(i)).or_default().versions.insert(i, v);
        }
    }

    pub(super) fn forget_bucket(&self, job_id: &str, b: i32) {
        if let Some(job) = self.lock().get_mut(job_id) {
            job.remove(&b);
        }
    }

    pub(super) fn forget_job(&self, job_id: &str) {
        self.lock().remove(job_id);
    }
}

/// What the handle knows of one job row (decision 0049): the runtime's
/// version, the `state` column with its write timestamp (to remove the
/// index entry of a state left), and the latest config version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct JobMeta {
    pub(super) version: u64,
    pub(super) state: String,
    pub(super) state_at: i64,
    pub(super) config_version: u64,
}

#[derive(Debug)]
enum JobSlot {
    /// A create of this id is running in this handle.
    Creating,
    Known(JobMeta),
}

/// Whether the handle knows a job.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum JobLookup {
    /// Not in the cache: read the row.
    Unknown,
    /// Being created by this handle: not a job yet for anyone.
    Creating,
    Known,
}

/// The handle's cache of job rows, where job creates decide "already
/// exists" and job runtime and config writes check their versions instead
/// of a Paxos round (decision 0049). Exact for the one writing handle;
/// a write whose outcome is unknown forgets the job, so the next one reads
/// the row again.
#[derive(Debug, Default)]
pub(super) struct JobVersions {
    jobs: Mutex<HashMap<String, JobSlot>>,
}

impl JobVersions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, JobSlot>> {
        // A panic while holding it leaves plain data, still consistent.
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lookup(&self, id: &str) -> JobLookup {
        match self.lock().get(id) {
            None => JobLookup::Unknown,
            Some(JobSlot::Creating) => JobLookup::Creating,
            Some(JobSlot::Known(_)) => JobLookup::Known,
        }
    }

    /// Takes `id` for a create: false if this handle knows the job or is
    /// creating it. Two creates of one id in this handle: one gets it.
    pub(super) fn reserve(&self, id: &str) -> bool {
        match self.lock().entry(id.to_string()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(JobSlot::Creating);
                true
            }
        }
    }

    /// A row as read from the database; what this handle knows stays (it
    /// comes from its own later writes, or a create in flight).
    pub(super) fn fill(&self, id: &str, meta: JobMeta) {
        self.lock().entry(id.to_string()).or_insert(JobSlot::Known(meta));
    }

    /// A create of this handle finished: the job is known.
    pub(super) fn created(&self, id: &str, meta: JobMeta) {
        self.lock().insert(id.to_string(), JobSlot::Known(meta));
    }

    pub(super) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Checks that the runtime is at `expected`, takes `expected + 1`, and
    /// records `state` written at `at`; returns the state left and its
    /// timestamp. [`StoreError::NotFound`] for a job being created here, a
    /// conflict without a version when the job is not known.
    pub(super) fn take_runtime(&self, id: &str, expected: u64, state: &str, at: i64) -> Result<(String, i64)> {
        let what = || format!("job {id}");
        match self.lock().get_mut(id) {
            Some(JobSlot::Known(m)) if m.version == expected => {
                m.version = expected + 1;
                let old = (std::mem::replace(&mut m.state, state.to_string()), m.state_at);
                m.state_at = at;
                Ok(old)
            }
            Some(JobSlot::Known(m)) => Err(StoreError::conflict(what(), expected, Some(m.version))),
            Some(JobSlot::Creating) => Err(StoreError::not_found("job", id)),
            None => Err(StoreError::conflict(what(), expected, None)),
        }
    }

    /// Checks that the latest config is `version - 1` and takes `version`.
    pub(super) fn take_config(&self, id: &str, version: u64) -> Result<()> {
        let what = || format!("config of job {id}");
        match self.lock().get_mut(id) {
            Some(JobSlot::Known(m)) if m.config_version + 1 == version => {
                m.config_version = version;
                Ok(())
            }
            Some(JobSlot::Known(m)) => Err(StoreError::conflict(what(), version - 1, Some(m.config_version))),
            Some(JobSlot::Creating) => Err(StoreError::not_found("job", id)),
            None => Err(StoreError::conflict(what(), version - 1, None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_id_is_reserved_once_and_a_runtime_version_taken_once() {
        let j = JobVersions::default();
        assert!(j.reserve("a"), "the first create takes the id");
        assert!(!j.reserve("a"), "a second create of it in this handle is refused");
        assert_eq!(j.lookup("a"), JobLookup::Creating);
        assert!(j.take_runtime("a", 1, "RUNNING", 5).expect_err("not a job yet").is_not_found());
        let meta = JobMeta { version: 1, state: "PENDING".into(), state_at: 4, config_version: 1 };
        j.fill("a", meta.clone());
        assert_eq!(j.lookup("a"), JobLookup::Creating, "a read does not replace a create in flight");
        j.created("a", meta);
        assert_eq!(j.take_runtime("a", 1, "RUNNING", 5).expect("expected version"), ("PENDING".into(), 4));
        assert!(j.take_runtime("a", 1, "KILLED", 6).expect_err("taken").is_conflict(), "the second writer loses");
        assert_eq!(j.take_runtime("a", 2, "KILLED", 7).expect("the next one"), ("RUNNING".into(), 5));
        j.take_config("a", 2).expect("config 2 after 1");
        assert!(j.take_config("a", 2).expect_err("taken").is_conflict());
        assert!(!j.reserve("a"), "a known job exists");
        j.forget("a");
        assert_eq!(j.lookup("a"), JobLookup::Unknown);
        assert!(j.take_runtime("a", 3, "KILLED", 8).expect_err("unknown").is_conflict());
    }

    #[test]
    fn a_version_is_taken_once_and_unknown_tasks_are_read_first() {
        let v = Versions::default();
        assert_eq!(v.missing_buckets("j", [1, 2, 150].into_iter()), vec![0, 1]);
        v.fill("j", 0, [(1, 3), (2, 1)].into_iter());
        assert_eq!(v.missing_buckets("j", [1, 2, 150].into_iter()), vec![1]);
        v.take("j", 1, 3).expect("expected version");
        assert!(v.take("j", 1, 3).expect_err("taken").is_conflict(), "a second writer of version 3 loses");
        v.take("j", 1, 4).expect("the next one");
        assert!(v.take("j", 7, 1).expect_err("absent").is_not_found());
        v.fill("j", 0, [(1, 3)].into_iter());
        v.take("j", 1, 5).expect("a read does not go back on the handle's own writes");
        v.forget_bucket("j", 0);
        assert_eq!(v.missing_buckets("j", [1].into_iter()), vec![0]);
        v.set("j", &[(250, 1)]);
        assert!(v.missing_buckets("j", [250].into_iter()).is_empty(), "created here: known");
        assert_eq!(v.missing_buckets("j", [251].into_iter()), vec![2], "the rest of its bucket is not");
        v.forget_job("j");
        assert_eq!(v.missing_buckets("j", [250].into_iter()), vec![2]);
    }
}

//! Retention of finished jobs (issue 27 item 4; docs/operations.md,
//! "Retention"): on the leader, a background task removes jobs that ended
//! more than `max_age_days` ago, and the oldest finished jobs beyond
//! `max_finished_jobs`, at most `batch` per sweep, through the job
//! manager's own delete (which refuses a job whose tasks are still
//! stopping), so the store does not grow without end. A job's tasks, task
//! events, updates and job events go with it.
//!
//! Task events are bounded already, per task (the 100 newest, and on
//! Cassandra a TTL), and job events per job (200, 7 days): what grows
//! without end is the finished jobs, which this removes.

use std::future::Future;
use std::time::Duration;

use paceline_model::job::JobState;
use paceline_storage::{JobQuery, Store};
use serde::{Deserialize, Serialize};

/// `retention:` in the server's config file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Finished jobs (succeeded, failed, killed) are removed this many days
    /// after they ended (default 30; 0 keeps them regardless of age).
    pub max_age_days: u64,
    /// At most this many finished jobs are kept, the oldest removed first
    /// (default 100,000; 0 for no bound on the count).
    pub max_finished_jobs: u64,
    /// Most jobs removed per sweep (default 200): a sweep is a bounded
    /// amount of work, and the next comes soon when one was full.
    pub batch: u64,
    /// Seconds between sweeps when the last found nothing more to remove
    /// (default 300).
    pub interval_secs: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { max_age_days: 30, max_finished_jobs: 100_000, batch: 200, interval_secs: 300 }
    }
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Finished jobs found.
    pub finished: u64,
    /// Of those, due for removal (too old, or beyond the count).
    pub due: u64,
    /// Removed by this sweep (at most the batch).
    pub removed: u64,
    /// Due but refused by the delete (tasks still stopping); tried again later.
    pub refused: u64,
}

fn terminal_states() -> Vec<JobState> {
    JobState::ALL.into_iter().filter(|s| s.is_terminal()).collect()
}

/// The finished jobs due for removal at `now_ms`, oldest first (ended
/// before `now_ms - max_age`, or the oldest beyond the count), and how many
/// finished jobs there are. One pass over the finished jobs' summaries.
async fn due_jobs(
    store: &dyn Store,
    config: &RetentionConfig,
    now_ms: u64,
) -> Result<(u64, Vec<String>), paceline_storage::StoreError> {
    let mut finished: Vec<(u64, String)> = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .query_jobs(&JobQuery {
                states: terminal_states(),
                limit: 1000,
                cursor: cursor.take(),
                ..JobQuery::default()
            })
            .await?;
        for j in page.items {
            // A job that ended without a completion time (written before it
            // was recorded) counts from its last change.
            let ended = j.runtime.completed_at_ms.unwrap_or(j.runtime.updated_at_ms);
            finished.push((ended, j.id));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    finished.sort();
    let cutoff =
        (config.max_age_days > 0).then(|| now_ms.saturating_sub(config.max_age_days.saturating_mul(86_400_000)));
    let over =
        if config.max_finished_jobs > 0 { (finished.len() as u64).saturating_sub(config.max_finished_jobs) } else { 0 };
    let count = finished.len() as u64;
    let due = finished
        .into_iter()
        .enumerate()
        .filter(|(i, (ended, _))| (*i as u64) < over || cutoff.is_some_and(|c| *ended < c))
        .map(|(_, (_, id))| id)
        .collect();
    Ok((count, due))
}

/// Removes `ids` with `delete`, counting into `out`.
async fn remove<F, Fut, E>(ids: &[String], out: &mut Sweep, delete: &mut F)
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    for id in ids {
        match delete(id.clone()).await {
            Ok(()) => out.removed += 1,
            Err(e) => {
                out.refused += 1;
                tracing::debug!(job = %id, error = %e, "retention: job not removed yet");
            }
        }
    }
}

/// One sweep: lists the finished jobs, picks those due, and removes up to
/// `batch` of them, oldest first, with `delete`.
pub async fn sweep<F, Fut, E>(
    store: &dyn Store,
    config: &RetentionConfig,
    now_ms: u64,
    mut delete: F,
) -> Result<Sweep, paceline_storage::StoreError>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let (finished, due) = due_jobs(store, config, now_ms).await?;
    let mut out = Sweep { finished, due: due.len() as u64, ..Sweep::default() };
    let batch = due.len().min(config.batch.max(1) as usize);
    remove(&due[..batch], &mut out, &mut delete).await;
    Ok(out)
}

/// Runs until the task is dropped: lists the due jobs once, removes them
/// `batch` at a time with a second between batches (so removal stays a
/// trickle beside the scheduler's writes, and a large backlog is not listed
/// again per batch), then waits `interval_secs`. Ages are measured on
/// `clock`, the one the job manager stamps completions with.
pub async fn run(
    store: std::sync::Arc<dyn Store>,
    jobs: std::sync::Arc<crate::JobManager>,
    clock: std::sync::Arc<dyn paceline_joints::Clock>,
    config: RetentionConfig,
) {
    if config.max_age_days == 0 && config.max_finished_jobs == 0 {
        return;
    }
    let mut delete = |id: String| {
        let jobs = jobs.clone();
        async move { jobs.delete(&id).await }
    };
    loop {
        match due_jobs(store.as_ref(), &config, clock.now_ms()).await {
            Ok((finished, due)) => {
                let mut out = Sweep { finished, due: due.len() as u64, ..Sweep::default() };
                for (i, chunk) in due.chunks(config.batch.max(1) as usize).enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    remove(chunk, &mut out, &mut delete).await;
                }
                if out.removed > 0 {
                    tracing::info!(
                        removed = out.removed,
                        due = out.due,
                        finished = out.finished,
                        "retention: finished jobs removed"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "retention sweep failed"),
        }
        tokio::time::sleep(Duration::from_secs(config.interval_secs.max(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use paceline_model::job::{JobConfig, JobKind, JobRuntime};
    use paceline_model::task::{TaskEvent, TaskRuntime, TaskSpec, TaskState};
    use paceline_storage::memory::MemoryStore;

    use super::*;

    const DAY: u64 = 86_400_000;

    fn config() -> JobConfig {
        JobConfig {
            name: "j".into(),
            owner: "o".into(),
            pool: "/default".into(),
            kind: JobKind::Batch,
            instance_count: 1,
            default_task: TaskSpec { command: "true".into(), ..Default::default() },
            ..Default::default()
        }
    }

    /// A job in `state`, ended `ended` ms after the epoch (if it ended).
    async fn job(s: &dyn Store, id: &str, state: JobState, ended: Option<u64>) {
        let mut rt = JobRuntime::initial(1, 0);
        rt.state = state;
        rt.completed_at_ms = ended;
        rt.updated_at_ms = ended.unwrap_or(0);
        s.create_job(id, &config(), &rt).await.expect("job");
    }

    async fn ids(s: &dyn Store) -> Vec<String> {
        let page = s.query_jobs(&JobQuery { limit: 100, ..Default::default() }).await.expect("query");
        let mut ids: Vec<String> = page.items.into_iter().map(|j| j.id).collect();
        ids.sort();
        ids
    }

    async fn sweep_with_store(s: &Arc<MemoryStore>, c: &RetentionConfig, now: u64) -> Sweep {
        let store = s.clone();
        sweep(s.as_ref(), c, now, |id| {
            let store = store.clone();
            async move { store.delete_job(&id).await }
        })
        .await
        .expect("sweep")
    }

    #[tokio::test]
    async fn old_and_surplus_finished_jobs_go_oldest_first_in_bounded_batches() {
        let s = Arc::new(MemoryStore::default());
        let now = 100 * DAY;
        // Ten finished jobs, ended 1..=10 days ago (f01 the newest), and two live ones.
        for d in 1..=10u64 {
            let state = [JobState::Succeeded, JobState::Failed, JobState::Killed][d as usize % 3];
            job(s.as_ref(), &format!("f{d:02}"), state, Some(now - d * DAY)).await;
        }
        job(s.as_ref(), "live-old", JobState::Running, None).await;
        job(s.as_ref(), "pending", JobState::Pending, None).await;
        let c = RetentionConfig { max_age_days: 7, max_finished_jobs: 5, batch: 2, interval_secs: 1 };

        // Due: older than 7 days (f08, f09, f10) and beyond the 5 newest (f06, f07 too).
        let first = sweep_with_store(&s, &c, now).await;
        assert_eq!((first.finished, first.due, first.removed), (10, 5, 2), "{first:?}");
        assert!(!ids(s.as_ref()).await.contains(&"f10".to_string()), "oldest first");
        assert!(ids(s.as_ref()).await.contains(&"f06".to_string()));
        while sweep_with_store(&s, &c, now).await.removed > 0 {}
        assert_eq!(ids(s.as_ref()).await, ["f01", "f02", "f03", "f04", "f05", "live-old", "pending"]);

        // Only by age, no bound on the count: f05 ages out two days later.
        let by_age = RetentionConfig { max_finished_jobs: 0, batch: 100, ..c.clone() };
        assert_eq!(sweep_with_store(&s, &by_age, now + 2 * DAY + 1).await.removed, 1);
        // Neither bound: nothing is ever due.
        let off = RetentionConfig { max_age_days: 0, max_finished_jobs: 0, ..c };
        assert_eq!(sweep_with_store(&s, &off, now + 1000 * DAY).await.due, 0);
    }

    #[tokio::test]
    async fn a_refused_delete_is_counted_and_tried_again_later() {
        let s = Arc::new(MemoryStore::default());
        job(s.as_ref(), "a", JobState::Killed, Some(1)).await;
        job(s.as_ref(), "b", JobState::Killed, Some(2)).await;
        let c = RetentionConfig { max_age_days: 1, max_finished_jobs: 0, batch: 10, interval_secs: 1 };
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let out = sweep(s.as_ref(), &c, 10 * DAY, move |id| {
            seen.lock().expect("lock").push(id.clone());
            async move { if id == "a" { Err("job a still has 1 task(s) stopping") } else { Ok(()) } }
        })
        .await
        .expect("sweep");
        assert_eq!((out.removed, out.refused), (1, 1));
        assert_eq!(*asked.lock().expect("lock"), ["a", "b"]);
    }

    /// Store size per 100,000 finished tasks before and after retention, for
    /// docs/benchmarks.md ("Retention"): SQLite's live data measured as the
    /// size of a compacted copy (`VACUUM INTO`, the snapshot view).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "benchmark: prints figures for docs/benchmarks.md"]
    async fn retention_sizes() {
        let jobs: u64 = std::env::var("PACELINE_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("paceline.db");
        let s = Arc::new(paceline_storage::sqlite::SqliteStore::open(&path).expect("open"));
        let mut task = TaskRuntime::initial(1, 0);
        task.state = TaskState::Succeeded;
        task.host = Some("host-0001".into());
        for j in 0..jobs {
            let id = format!("job-{j:06}");
            job(s.as_ref(), &id, JobState::Succeeded, Some(j)).await;
            let tasks: Vec<_> = (0..100).map(|i| (i, task.clone())).collect();
            s.create_tasks(&id, &tasks).await.expect("tasks");
            let events: Vec<(u32, TaskEvent)> = (0..100)
                .flat_map(|i| {
                    [TaskState::Running, TaskState::Succeeded].into_iter().map(move |to| {
                        (
                            i,
                            TaskEvent {
                                run: 1,
                                from: None,
                                to,
                                at_ms: u64::from(i) * 2 + u64::from(to == TaskState::Succeeded),
                                host: Some("host-0001".into()),
                                reason: "R".into(),
                                message: String::new(),
                            },
                        )
                    })
                })
                .collect();
            s.append_job_events(&id, &events).await.expect("events");
        }
        let live = |s: &Arc<paceline_storage::sqlite::SqliteStore>| {
            let s = s.clone();
            let dir = dir.path().to_path_buf();
            async move {
                let view = s.consistent_view().await.expect("view").expect("sqlite");
                let size = std::fs::read_dir(&dir)
                    .expect("dir")
                    .filter_map(|e| e.ok())
                    .filter(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.contains(".snapshot-") && !name.ends_with("-wal") && !name.ends_with("-shm")
                    })
                    .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                    .sum::<u64>();
                drop(view);
                size
            }
        };
        let file = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let wal = dir.path().join("paceline.db-wal");
        let before = live(&s).await;
        let before_file = file(&path) + file(&wal);
        let c = RetentionConfig { max_age_days: 0, max_finished_jobs: jobs / 10, batch: 200, interval_secs: 1 };
        let started = std::time::Instant::now();
        let mut sweeps = 0;
        loop {
            let store = s.clone();
            let out = sweep(s.as_ref(), &c, jobs, |id| {
                let store = store.clone();
                async move { store.delete_job(&id).await }
            })
            .await
            .expect("sweep");
            sweeps += 1;
            if out.removed == 0 {
                break;
            }
        }
        let took = started.elapsed().as_secs_f64();
        let after = live(&s).await;
        let after_file = file(&path) + file(&wal);
        let per = |b: u64| b as f64 / (jobs as f64 * 100.0 / 100_000.0) / (1024.0 * 1024.0);
        println!(
            "| sqlite | {} finished tasks (2 events each) | live {:.1} MiB ({:.1} MiB per 100,000 tasks), file {:.1} MiB | kept {} jobs: live {:.1} MiB, file {:.1} MiB | {sweeps} sweeps of ≤ 200 in {took:.1} s |",
            jobs * 100,
            before as f64 / 1048576.0,
            per(before),
            before_file as f64 / 1048576.0,
            c.max_finished_jobs,
            after as f64 / 1048576.0,
            after_file as f64 / 1048576.0
        );
        assert_eq!(ids(s.as_ref()).await.len().min(100), (c.max_finished_jobs as usize).min(100));
    }
}

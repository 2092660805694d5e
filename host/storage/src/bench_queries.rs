//! `paceline bench job-queries`: job queries on a store holding many jobs
//! (issue 27 item 4), answered the way `QueryJobs` answers them, and on
//! Cassandra also by the scan filtered here that every query was before
//! the index (decision 0033), in the same run.
//!
//! The jobs: `jobs` of one task each, created with
//! [`Store::create_job_with_tasks`] `concurrency` at a time; job `i` is in
//! pool `/team-{i % 20}`, owned by `user-{i % 50}`, labelled
//! `app=app-{i % 500}`; job `i` is RUNNING when `i % 101 == 0` (about one in a
//! hundred, and one in 5,050 of an owner's), the rest SUCCEEDED.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use paceline_model::job::{JobConfig, JobRuntime, JobState};
use paceline_model::task::TaskRuntime;

use crate::cassandra::CassandraStore;
use crate::error::Result;
use crate::store::Store;
use crate::types::{JobQuery, JobSummary, Page};

/// One query's figures.
#[derive(Clone, Debug)]
pub struct QueryFigures {
    /// What was asked.
    pub name: String,
    /// Jobs returned (every page when `all_pages`).
    pub matches: usize,
    /// Time through [`Store::query_jobs`] (or `live_jobs`).
    pub store: Duration,
    /// Time by a scan of every job filtered in the client (Cassandra only).
    pub scan: Option<Duration>,
}

/// The report.
#[derive(Clone, Debug, Default)]
pub struct QueriesReport {
    /// `sqlite` or `cassandra`.
    pub backend: String,
    /// Jobs in the store.
    pub jobs: u32,
    /// Time to create them (and set their states).
    pub create: Duration,
    /// Each query.
    pub queries: Vec<QueryFigures>,
}

impl fmt::Display for QueriesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} jobs created in {:.1} s ({:.0} jobs/s, each with its task, all or nothing)",
            self.backend,
            self.jobs,
            self.create.as_secs_f64(),
            f64::from(self.jobs) / self.create.as_secs_f64().max(1e-9)
        )?;
        writeln!(f, "{:<44} {:>8} {:>12} {:>12} {:>8}", "query", "matches", "answer", "scan", "scan/ans")?;
        for q in &self.queries {
            let (scan, ratio) = match q.scan {
                Some(s) => (
                    format!("{:.1}ms", s.as_secs_f64() * 1e3),
                    format!("{:.0}x", s.as_secs_f64() / q.store.as_secs_f64().max(1e-9)),
                ),
                None => ("-".into(), "-".into()),
            };
            writeln!(
                f,
                "{:<44} {:>8} {:>10.1}ms {:>12} {:>8}",
                q.name,
                q.matches,
                q.store.as_secs_f64() * 1e3,
                scan,
                ratio
            )?;
        }
        Ok(())
    }
}

fn config(i: u32) -> JobConfig {
    let mut c = JobConfig {
        name: format!("job-{i}"),
        owner: format!("user-{}", i % 50),
        pool: format!("/team-{}", i % 20),
        instance_count: 1,
        ..Default::default()
    };
    c.default_task.command = "/bin/true".into();
    c.default_task.resources.cpu_millis = 100;
    c.default_task.resources.memory_mib = 64;
    c.labels.insert("app".into(), format!("app-{}", i % 500));
    c
}

async fn create_all(store: &Arc<dyn Store>, prefix: &str, jobs: u32, concurrency: usize) -> Result<()> {
    futures::stream::iter(0..jobs)
        .map(|i| {
            let store = store.clone();
            let id = format!("{prefix}-{i:07}");
            async move {
                let task = [(0u32, TaskRuntime::initial(1, 0))];
                let mut rt = store.create_job_with_tasks(&id, &config(i), &JobRuntime::initial(1, 0), &task).await?;
                rt.state = if i % 101 == 0 { JobState::Running } else { JobState::Succeeded };
                store.cas_job_runtime(&id, 1, &rt).await.map(drop)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// Every page of `q` (or the first only), with `ask`.
async fn pages<F, Fut>(q: &JobQuery, all_pages: bool, ask: F) -> Result<(usize, Duration)>
where
    F: Fn(JobQuery) -> Fut,
    Fut: std::future::Future<Output = Result<Page<JobSummary>>>,
{
    let start = Instant::now();
    let mut q = q.clone();
    let mut n = 0;
    loop {
        let page = ask(q.clone()).await?;
        n += page.items.len();
        match page.next {
            Some(c) if all_pages => q.cursor = Some(c),
            _ => break,
        }
    }
    Ok((n, start.elapsed()))
}

/// Creates the jobs in `store`, then times the queries.
pub async fn run(
    store: Arc<dyn Store>,
    cassandra: Option<&CassandraStore>,
    jobs: u32,
    concurrency: usize,
) -> Result<QueriesReport> {
    let prefix = format!("q{}", crate::types::now_ms());
    let start = Instant::now();
    create_all(&store, &prefix, jobs, concurrency).await?;
    let create = start.elapsed();
    let labels = |v: &str| [("app".to_string(), v.to_string())].into();
    let cases: Vec<(&str, JobQuery, bool)> = vec![
        ("owner user-7, first page of 100", JobQuery { owner: Some("user-7".into()), ..Default::default() }, false),
        ("pool /team-3, first page of 100", JobQuery { pool: Some("/team-3".into()), ..Default::default() }, false),
        ("label app=app-42, every page", JobQuery { labels: labels("app-42"), ..Default::default() }, true),
        ("state RUNNING, every page", JobQuery { states: vec![JobState::Running], ..Default::default() }, true),
        (
            "owner user-0 and RUNNING, every page",
            JobQuery { owner: Some("user-0".into()), states: vec![JobState::Running], ..Default::default() },
            true,
        ),
        ("no filter, first page of 100", JobQuery::default(), false),
    ];
    let mut queries = Vec::new();
    for (name, q, all_pages) in cases {
        let q = JobQuery { limit: 100, ..q };
        let (matches, took) = pages(&q, all_pages, |q| {
            let store = store.clone();
            async move { store.query_jobs(&q).await }
        })
        .await?;
        let scan = match cassandra {
            Some(c) => Some(pages(&q, all_pages, |q| async move { c.query_jobs_by_scan(&q).await }).await?.1),
            None => None,
        };
        queries.push(QueryFigures { name: name.to_string(), matches, store: took, scan });
    }
    let start = Instant::now();
    let live = store.live_jobs().await?.len();
    let took = start.elapsed();
    // Before the index, live jobs were one scan of every job.
    let scan = match cassandra {
        Some(c) => {
            let live_states = JobState::ALL.into_iter().filter(|s| !s.is_terminal()).collect();
            let q = JobQuery { states: live_states, limit: crate::types::limits::MAX_PAGE, ..Default::default() };
            let start = Instant::now();
            c.query_jobs_by_scan(&q).await?;
            Some(start.elapsed())
        }
        None => None,
    };
    queries.push(QueryFigures { name: "live jobs (a leader's recovery)".into(), matches: live, store: took, scan });
    Ok(QueriesReport { backend: store.backend().to_string(), jobs, create, queries })
}

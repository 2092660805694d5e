//! Figures for docs/benchmarks.md ("Snapshots and migration"): the time and
//! size of a snapshot and its restore, and the migration rate per backend.
//! Not a timed test: it asserts only that the copies are whole, and prints.
//!
//! ```sh
//! cargo test --release -p paceline-storage --test all -- --ignored snapshot_figures --nocapture
//! # sizes: PACELINE_BENCH_JOBS (10000), PACELINE_BENCH_TASKS_PER_JOB (100),
//! # PACELINE_BENCH_CASSANDRA_JOBS (1000; 0 skips Cassandra, which needs cassandra.sh env)
//! ```

use std::sync::Arc;
use std::time::Instant;

use paceline_model::job::JobRuntime;
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use paceline_storage::snapshot::{self, migrate};
use paceline_storage::sqlite::SqliteStore;
use paceline_storage::{JobQuery, Store};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `jobs` jobs of `tasks` tasks each, every task RUNNING with one event.
async fn fill(s: &dyn Store, jobs: u64, tasks: u32) {
    let mut rt = TaskRuntime::initial(1, 7);
    rt.state = TaskState::Running;
    rt.host = Some("host-0001".into());
    rt.agent_id = Some("agent-0001".into());
    rt.ports.insert("http".into(), 31_000);
    for j in 0..jobs {
        let id = format!("job-{j:06}");
        let mut cfg = crate::conformance::config(&format!("team-{}", j % 20), tasks);
        cfg.labels.insert("app".into(), format!("app-{}", j % 100));
        s.create_job(&id, &cfg, &JobRuntime::initial(1, j)).await.expect("job");
        let batch: Vec<(u32, TaskRuntime)> = (0..tasks).map(|i| (i, rt.clone())).collect();
        s.create_tasks(&id, &batch).await.expect("tasks");
        let events: Vec<(u32, TaskEvent)> = (0..tasks)
            .map(|i| {
                (
                    i,
                    TaskEvent {
                        run: 1,
                        from: Some(TaskState::Starting),
                        to: TaskState::Running,
                        at_ms: 1_000 + u64::from(i),
                        host: Some("host-0001".into()),
                        reason: "STARTED".into(),
                        message: String::new(),
                    },
                )
            })
            .collect();
        s.append_job_events(&id, &events).await.expect("events");
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures for docs/benchmarks.md"]
async fn snapshot_figures() {
    let jobs = env("PACELINE_BENCH_JOBS", 10_000);
    let tasks = env("PACELINE_BENCH_TASKS_PER_JOB", 100) as u32;
    let cjobs = env("PACELINE_BENCH_CASSANDRA_JOBS", 1_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let src = SqliteStore::open(dir.path().join("src.db")).expect("open");
    let t = Instant::now();
    fill(&src, jobs, tasks).await;
    println!("filled sqlite: {jobs} jobs × {tasks} tasks in {:.1}s", t.elapsed().as_secs_f64());
    let db_size = std::fs::metadata(dir.path().join("src.db")).expect("size").len()
        + std::fs::metadata(dir.path().join("src.db-wal")).map(|m| m.len()).unwrap_or(0);

    let file = dir.path().join("cluster.snap");
    let t = Instant::now();
    let mut sink = std::io::BufWriter::new(std::fs::File::create(&file).expect("create"));
    let trailer = snapshot::export(&src, &mut sink).await.expect("export");
    std::io::Write::flush(&mut sink).expect("flush");
    drop(sink);
    let save = t.elapsed().as_secs_f64();
    let size = std::fs::metadata(&file).expect("size").len();
    assert_eq!(trailer.counts["task"], jobs * u64::from(tasks));
    let t = Instant::now();
    snapshot::verify(&file).expect("verify");
    let verify = t.elapsed().as_secs_f64();
    let restored = dir.path().join("restored.db");
    let t = Instant::now();
    snapshot::restore_sqlite_file(&file, &restored).await.expect("restore");
    let restore = t.elapsed().as_secs_f64();
    println!(
        "| sqlite | {jobs} | {} | {:.0} MiB | {save:.1} s | {:.0} MiB | {verify:.1} s | {restore:.1} s |",
        jobs * u64::from(tasks),
        mib(db_size),
        mib(size)
    );

    // Migration rates: SQLite → SQLite on this machine, and into and out of
    // the Cassandra node of `cassandra.sh` with `cjobs` jobs.
    let dst = SqliteStore::open(dir.path().join("copy.db")).expect("open");
    let t = Instant::now();
    let r = migrate::migrate(&src, &dst, "src", &mut |_| {}).await.expect("migrate");
    let secs = t.elapsed().as_secs_f64();
    let records: u64 = r.verified.values().sum();
    println!(
        "| sqlite → sqlite | {jobs} | {} | {secs:.1} s | {:.0} jobs/s | {:.0} records/s |",
        jobs * u64::from(tasks),
        jobs as f64 / secs,
        records as f64 / secs
    );
    drop(dst);
    if cjobs == 0 {
        return;
    }
    let small = SqliteStore::open(dir.path().join("small.db")).expect("open");
    fill(&small, cjobs, tasks).await;
    let (cass, ks): (Arc<dyn Store>, String) = crate::cassandra::fresh("bench_migrate").await;
    let t = Instant::now();
    let r = migrate::migrate(&small, cass.as_ref(), "small", &mut |_| {}).await.expect("migrate to cassandra");
    let secs = t.elapsed().as_secs_f64();
    let records: u64 = r.verified.values().sum();
    println!(
        "| sqlite → cassandra | {cjobs} | {} | {secs:.1} s | {:.0} jobs/s | {:.0} records/s |",
        cjobs * u64::from(tasks),
        cjobs as f64 / secs,
        records as f64 / secs
    );
    let back = SqliteStore::open(dir.path().join("back.db")).expect("open");
    let t = Instant::now();
    let r = migrate::migrate(cass.as_ref(), &back, "cass", &mut |_| {}).await.expect("migrate from cassandra");
    let secs = t.elapsed().as_secs_f64();
    let records: u64 = r.verified.values().sum();
    println!(
        "| cassandra → sqlite | {cjobs} | {} | {secs:.1} s | {:.0} jobs/s | {:.0} records/s |",
        cjobs * u64::from(tasks),
        cjobs as f64 / secs,
        records as f64 / secs
    );
    let t = Instant::now();
    let mut bytes = Vec::new();
    let trailer = snapshot::export(cass.as_ref(), &mut bytes).await.expect("export cassandra");
    println!(
        "| cassandra snapshot | {cjobs} | {} | {:.1} s | {:.0} MiB |",
        trailer.counts["task"],
        t.elapsed().as_secs_f64(),
        mib(bytes.len() as u64)
    );
    assert_eq!(back.query_jobs(&JobQuery { limit: 1, ..Default::default() }).await.expect("q").items.len(), 1);
    crate::cassandra::drop_keyspace(&ks).await;
}
